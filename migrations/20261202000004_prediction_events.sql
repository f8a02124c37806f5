-- Predictions change what the dashboard shows (predictions per choice): live pages hear of them on
-- the same channel as job changes, one coalesced message per statement.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE FUNCTION kickoff_notify_predictions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    SELECT json_build_object('op', 'predictions', 'n', count(*),
               'questions', (SELECT json_agg(DISTINCT question_id) FROM (
                                 SELECT question_id FROM new_rows LIMIT 100) q))::text
      INTO payload FROM new_rows HAVING count(*) > 0;
    IF payload IS NOT NULL THEN
        PERFORM pg_notify('kickoff_events', payload);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER predictions_events_after_insert AFTER INSERT ON predictions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_predictions();
CREATE TRIGGER predictions_events_after_update AFTER UPDATE ON predictions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_predictions();
