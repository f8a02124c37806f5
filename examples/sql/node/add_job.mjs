// A game saved with its Kickoff job in one transaction, from Node (node-postgres; docs/embedding.md).
//
//   node add_job.mjs <game id> <webhook url> commit|rollback|refused
//
// It prints one JSON line: the job (`{"job": id, "scheduled_at": ...}`), or for `refused` the
// error Kickoff's check raised (`{"sqlstate": "KO001", "column": "priority", "message": ...}`).
// Rolled back, neither the game nor its job exists.
import pg from "pg";

const [game, url, finish] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  await client.query("BEGIN");
  const { rows: [saved] } = await client.query(
    `INSERT INTO games (id, name, starts_at)
     VALUES ($1, 'Grêmio - Internacional', now() + interval '1 second') RETURNING starts_at`,
    [game],
  );
  const { rows: [job] } = await client.query(
    `SELECT id, scheduled_at FROM kickoff_add_job(
       'webhook', $1::jsonb, scheduled_at => $2, unique_key => $3, priority => $4)`,
    [
      JSON.stringify({ url, body: { game, event: "kickoff" } }),
      saved.starts_at,
      `game-kickoff:${game}`,
      // A priority Kickoff refuses (0 to 9), to show the error it raises.
      finish === "refused" ? 10 : 0,
    ],
  );
  console.log(JSON.stringify({ job: Number(job.id), scheduled_at: job.scheduled_at.toISOString() }));
  await client.query(finish === "rollback" ? "ROLLBACK" : "COMMIT");
} catch (e) {
  await client.query("ROLLBACK");
  // Kickoff's refusals: SQLSTATE class KO, the field in the error's column.
  console.log(JSON.stringify({ sqlstate: e.code, column: e.column, message: e.message }));
} finally {
  await client.end();
}
