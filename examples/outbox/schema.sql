-- examples/outbox/schema.sql — the application's side of the outbox.
--
-- Apply after `skiplock init`.  `posts` is the application's own table;
-- `outbox_publish` inserts a post and, in the same transaction, one
-- delivery job per channel.  Either the post and all its deliveries exist,
-- or nothing does: no "post saved, channel forgotten" state is possible.

CREATE TABLE IF NOT EXISTS posts (
    id         bigserial PRIMARY KEY,
    slug       text NOT NULL UNIQUE,
    title      text NOT NULL,
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The channels a post goes to; each is a job kind "outbox.<channel>" that a
-- worker delivers with `--webhook outbox.<channel>=URL`.
CREATE OR REPLACE FUNCTION outbox_channels() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$ SELECT ARRAY['telegraph', 'tg_ru', 'tg_en', 'vk'] $$;

-- Publishes a post: returns its id, or NULL when the slug already exists
-- (then nothing is enqueued again: the first call's deliveries stand).
CREATE OR REPLACE FUNCTION outbox_publish(p_slug text, p_title text, p_body text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    post_id bigint;
    channel text;
BEGIN
    INSERT INTO posts (slug, title, body) VALUES (p_slug, p_title, p_body)
    ON CONFLICT (slug) DO NOTHING
    RETURNING id INTO post_id;
    IF post_id IS NULL THEN
        RETURN NULL;
    END IF;
    FOREACH channel IN ARRAY outbox_channels() LOOP
        PERFORM skiplock.enqueue(
            kind       => 'outbox.' || channel,
            payload    => jsonb_build_object('post_id', post_id, 'slug', p_slug,
                                             'title', p_title, 'body', p_body,
                                             'channel', channel),
            queue      => 'outbox',
            unique_key => format('post:%s:%s', post_id, channel),
            max_attempts => 50);
    END LOOP;
    RETURN post_id;
END $$;

-- Where each post stands, channel by channel.
CREATE OR REPLACE VIEW outbox_status AS
SELECT p.id AS post_id, p.slug, c.channel, j.state, j.attempt, j.finished_at,
       j.errors -> -1 ->> 'error' AS last_error
FROM posts p
CROSS JOIN unnest(outbox_channels()) AS c(channel)
LEFT JOIN LATERAL (
    SELECT state, attempt, finished_at, errors FROM skiplock.all_jobs
    WHERE unique_key = format('post:%s:%s', p.id, c.channel)
    ORDER BY id DESC LIMIT 1
) j ON true;
