-- Issue 30: the alerts fed on their own notifications, kept every incident forever, and read or
-- counted every incident at each evaluation and each /metrics scrape.
-- Migrations are immutable once landed: change the schema in a new file.

-- Which jobs are notifications of the alerts (see `alerts::store::notifications`). The evaluation
-- inserts a row in the transaction that inserts the job; nothing else writes here, so an API
-- caller cannot make a job of theirs one (a job's meta can say anything). No foreign key: the
-- pruner deletes jobs freely, and a mark is deleted only once its job is gone.
CREATE TABLE alert_notifications (
    job_id     bigint      PRIMARY KEY,
    -- When its job was seen finished or gone (NULL: it may still run): the reads that take the
    -- notifications out of per-queue counts read the marks not settled, or settled lately.
    settled_at timestamptz
);
-- NULLs included: `settled_at IS NULL` and `settled_at >= t` both walk it.
CREATE INDEX alert_notifications_settled_idx ON alert_notifications (settled_at);

-- The notifications inserted before this migration: webhook jobs that no API caller inserted
-- (created_by is set for every job inserted through the API or the dashboard) and that name an
-- incident, as the evaluation wrote them. Settled by the next evaluation.
INSERT INTO alert_notifications (job_id)
SELECT j.id FROM jobs j
WHERE j.kind = 'webhook' AND j.created_by IS NULL
  AND jsonb_typeof(j.meta -> 'alert_incident') = 'number'
  AND EXISTS (SELECT 1 FROM alert_incidents i
              WHERE i.id = (j.meta ->> 'alert_incident')::numeric);

-- An evaluation reads a page of a rule's open incidents by id, not all of them.
CREATE INDEX alert_incidents_open_id_idx ON alert_incidents (rule_id, id) WHERE resolved_at IS NULL;
-- The leader prunes resolved incidents by age.
CREATE INDEX alert_incidents_resolved_idx ON alert_incidents (resolved_at)
    WHERE resolved_at IS NOT NULL;

-- Each rule's incidents firing now and opened since it was made, for /metrics, kept by the
-- trigger below in the statements that open, resolve or delete incidents: a scrape reads the
-- rules (at most 200) instead of counting every incident ever, and pruning resolved incidents
-- does not lower `opened` (a Prometheus counter that goes down reads as a reset).
-- Writers must not change incidents between the backfill and the trigger: SHARE ROW EXCLUSIVE (what
-- CREATE TRIGGER takes anyway) waits for running writers and holds new ones until commit.
LOCK TABLE alert_incidents IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE alert_rules ADD COLUMN firing bigint NOT NULL DEFAULT 0,
                        ADD COLUMN opened bigint NOT NULL DEFAULT 0;

UPDATE alert_rules r SET firing = c.firing, opened = c.opened
FROM (SELECT rule_id, count(*) FILTER (WHERE resolved_at IS NULL) AS firing, count(*) AS opened
      FROM alert_incidents GROUP BY rule_id) c
WHERE c.rule_id = r.id;

-- One update of each rule row touched, per statement. A rule deleted with its incidents (ON DELETE
-- CASCADE) is gone by the time this runs: its update finds no row.
CREATE FUNCTION kickoff_alert_incident_counts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE alert_rules r SET opened = r.opened + c.n, firing = r.firing + c.open
        FROM (SELECT rule_id, count(*) AS n, count(*) FILTER (WHERE resolved_at IS NULL) AS open
              FROM new_rows GROUP BY rule_id) c
        WHERE r.id = c.rule_id;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE alert_rules r SET firing = r.firing - c.open
        FROM (SELECT rule_id, count(*) AS open FROM old_rows
              WHERE resolved_at IS NULL GROUP BY rule_id) c
        WHERE r.id = c.rule_id;
    ELSE
        -- Only the rows that opened or resolved: an acknowledgement changes no count.
        UPDATE alert_rules r SET firing = r.firing + c.delta
        FROM (SELECT n.rule_id,
                     sum(CASE WHEN n.resolved_at IS NULL THEN 1 ELSE -1 END) AS delta
              FROM old_rows o JOIN new_rows n ON n.id = o.id
              WHERE (o.resolved_at IS NULL) <> (n.resolved_at IS NULL)
              GROUP BY n.rule_id) c
        WHERE r.id = c.rule_id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER alert_incidents_counts_after_insert AFTER INSERT ON alert_incidents
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_alert_incident_counts();
CREATE TRIGGER alert_incidents_counts_after_update AFTER UPDATE ON alert_incidents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_alert_incident_counts();
CREATE TRIGGER alert_incidents_counts_after_delete AFTER DELETE ON alert_incidents
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_alert_incident_counts();

-- How far a `job_discarded` rule has read the discarded jobs (their `finalized_at`): each
-- evaluation reads on from there (less a slack for transactions that committed late, and the
-- rule's `for_secs`), oldest first, up to 100, leaving out jobs whose incident is open. A burst of
-- 1,000 discarded jobs fires 100 an evaluation until all have fired, and an evaluation never walks
-- every job discarded since the rule was made.
ALTER TABLE alert_rules ADD COLUMN discarded_seen_at timestamptz;
