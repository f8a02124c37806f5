"""A game saved with its Kickoff job in one transaction, from Python (psycopg 3; docs/embedding.md).

    python3 add_job.py <game id> <webhook url> commit|rollback|refused

It prints one JSON line: the job (`{"job": id, "scheduled_at": ...}`), or for `refused` the
error Kickoff's check raised (`{"sqlstate": "KO001", "column": "priority", "message": ...}`).
Rolled back, neither the game nor its job exists.
"""

import json
import os
import sys

import psycopg
from psycopg.types.json import Jsonb


def main():
    game, url, finish = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        try:
            with conn.transaction() as tx:
                starts_at = conn.execute(
                    "INSERT INTO games (id, name, starts_at)"
                    " VALUES (%s, 'Santos - Corinthians', now() + interval '1 second')"
                    " RETURNING starts_at",
                    (game,),
                ).fetchone()[0]
                job_id, scheduled_at = conn.execute(
                    "SELECT id, scheduled_at FROM kickoff_add_job("
                    "  'webhook', %s, scheduled_at => %s, unique_key => %s,"
                    "  priority => %s)",
                    (
                        Jsonb({"url": url, "body": {"game": game, "event": "kickoff"}}),
                        starts_at,
                        f"game-kickoff:{game}",
                        # A priority Kickoff refuses (0 to 9), to show the error it raises.
                        10 if finish == "refused" else 0,
                    ),
                ).fetchone()
                print(json.dumps({"job": job_id, "scheduled_at": scheduled_at.isoformat()}))
                if finish == "rollback":
                    raise psycopg.Rollback(tx)
        except psycopg.Error as e:
            # Kickoff's refusals: SQLSTATE class KO, the field in the error's column name.
            print(json.dumps({"sqlstate": e.diag.sqlstate, "column": e.diag.column_name,
                              "message": e.diag.message_primary}))


if __name__ == "__main__":
    main()
