-- The game domain: questions that lock at game time, and players' predictions.

CREATE TYPE question_status AS ENUM (
    'open',     -- taking predictions until game_time
    'locked',   -- game_time passed and the lock job ran: no more predictions
    'settled'   -- the correct choice is known and every prediction is scored
);

CREATE TABLE questions (
    id             bigserial PRIMARY KEY,
    game           text            NOT NULL CHECK (char_length(game) BETWEEN 1 AND 200),
    prompt         text            NOT NULL CHECK (char_length(prompt) BETWEEN 1 AND 500),
    choices        text[]          NOT NULL CHECK (cardinality(choices) BETWEEN 2 AND 20),
    game_time      timestamptz     NOT NULL,
    status         question_status NOT NULL DEFAULT 'open',
    locked_at      timestamptz,
    correct_choice text,
    settled_at     timestamptz,
    lock_job_id    bigint REFERENCES jobs (id) ON DELETE SET NULL,
    created_at     timestamptz     NOT NULL DEFAULT now(),

    CONSTRAINT locked_at_iff_not_open CHECK ((status = 'open') = (locked_at IS NULL)),
    CONSTRAINT settled_at_iff_settled CHECK ((status = 'settled') = (settled_at IS NOT NULL)),
    CONSTRAINT settled_has_answer CHECK (status <> 'settled' OR correct_choice IS NOT NULL),
    CONSTRAINT answer_is_a_choice CHECK (correct_choice IS NULL OR correct_choice = ANY (choices))
);

CREATE INDEX questions_status_game_time_idx ON questions (status, game_time);

CREATE TABLE predictions (
    question_id bigint      NOT NULL REFERENCES questions (id) ON DELETE CASCADE,
    player      text        NOT NULL CHECK (char_length(player) BETWEEN 1 AND 100),
    choice      text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    -- Set once by the settle job: whether the choice was the correct one.
    correct     boolean,
    PRIMARY KEY (question_id, player)
);

-- The settle job scores in batches the predictions not scored yet.
CREATE INDEX predictions_unscored_idx ON predictions (question_id) WHERE correct IS NULL;
