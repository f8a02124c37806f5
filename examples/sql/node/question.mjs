// A game saved with its question in one transaction, from Node (node-postgres; docs/embedding.md).
//
//   node question.mjs <game id> <game time, ISO 8601> commit|rollback|refused
//
// The question takes predictions until the game starts; Kickoff's job locks it then. It prints
// one JSON line: the question and its lock job (`{"question": id, "lock_job": id}`), or for
// `refused` the error Kickoff's check raised (`{"sqlstate": "KO001", "column": "choices", ...}`).
// Rolled back, neither the game nor its question nor its lock job exists.
import pg from "pg";

const [game, startsAt, finish] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
// One choice only: a question Kickoff refuses (2 to 20 choices), to show the error it raises.
const choices = finish === "refused" ? ["Ajax"] : ["Ajax", "PSV", "Nobody"];
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  await client.query("BEGIN");
  await client.query(
    "INSERT INTO games (id, name, starts_at) VALUES ($1, 'Ajax - PSV', $2)",
    [game, startsAt],
  );
  const { rows: [question] } = await client.query(
    `SELECT id, lock_job_id FROM kickoff_add_question(
       game => $1, prompt => 'Who scores first?', choices => $2,
       game_time => (SELECT starts_at FROM games WHERE id = $3))`,
    [`game-${game}`, choices, game],
  );
  console.log(JSON.stringify({ question: Number(question.id), lock_job: Number(question.lock_job_id) }));
  await client.query(finish === "rollback" ? "ROLLBACK" : "COMMIT");
} catch (e) {
  await client.query("ROLLBACK");
  // Kickoff's refusals: SQLSTATE class KO, the field in the error's column.
  console.log(JSON.stringify({ sqlstate: e.code, column: e.column, message: e.message }));
} finally {
  await client.end();
}
