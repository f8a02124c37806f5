"""Kickoff's checks for schemathesis (loaded by scripts/schemathesis through SCHEMATHESIS_HOOKS).

The built-in `positive_data_acceptance` (ST202) fails any schema-valid request answered 400 or
422. Some rules cannot be stated in a JSON Schema: they depend on what the server holds (a job
kind no worker runs, a choice the question lacks), on the clock (a time more than a day in the
past) or relate fields (a range over 1,500 points). The OpenAPI document names each such refusal
with the operation, by status and code (`x-kickoff-codes` on the response, and in words in its
description). This check is the built-in one, except that such a stated refusal passes; a
refusal with any other code (`invalid`: a rule the schema does not state) still fails.
"""

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance


def _stated_refusal(response, case):
    if response.status_code not in (400, 404, 409, 422):
        return False
    try:
        code = response.json()["error"]["code"]
    except Exception:
        return False
    responses = case.operation.definition.raw.get("responses", {})
    stated = responses.get(str(response.status_code), {}).get("x-kickoff-codes", [])
    return code in stated


@schemathesis.check
def positive_data_acceptance_or_stated_refusal(ctx, response, case):
    """A schema-valid request is accepted, or refused for a rule its operation states."""
    if _stated_refusal(response, case):
        return None
    return positive_data_acceptance(ctx, response, case)
