"""A game saved with its question in one transaction, from Python (psycopg 3; docs/embedding.md).

    python3 question.py <game id> <game time, ISO 8601> commit|rollback|refused

The question takes predictions until the game starts; Kickoff's job locks it then. It prints one
JSON line: the question and its lock job (`{"question": id, "lock_job": id}`), or for `refused`
the error Kickoff's check raised (`{"sqlstate": "KO001", "column": "choices", "message": ...}`).
Rolled back, neither the game nor its question nor its lock job exists.
"""

import json
import os
import sys
from datetime import datetime

import psycopg


def main():
    game, starts_at, finish = int(sys.argv[1]), datetime.fromisoformat(sys.argv[2]), sys.argv[3]
    # One choice only: a question Kickoff refuses (2 to 20 choices), to show the error it raises.
    choices = ["Ajax"] if finish == "refused" else ["Ajax", "PSV", "Nobody"]
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        try:
            with conn.transaction() as tx:
                conn.execute(
                    "INSERT INTO games (id, name, starts_at) VALUES (%s, 'Ajax - PSV', %s)",
                    (game, starts_at),
                )
                question, lock_job = conn.execute(
                    "SELECT id, lock_job_id FROM kickoff_add_question("
                    "  game => %s, prompt => 'Who scores first?', choices => %s,"
                    "  game_time => (SELECT starts_at FROM games WHERE id = %s))",
                    (f"game-{game}", choices, game),
                ).fetchone()
                print(json.dumps({"question": question, "lock_job": lock_job}))
                if finish == "rollback":
                    raise psycopg.Rollback(tx)
        except psycopg.Error as e:
            # Kickoff's refusals: SQLSTATE class KO, the field in the error's column name.
            print(json.dumps({"sqlstate": e.diag.sqlstate, "column": e.diag.column_name,
                              "message": e.diag.message_primary}))


if __name__ == "__main__":
    main()
