-- Processes that follow agent events through the store (`wait_for_events`) and so need the
-- NOTIFY each append announces. Writers send NOTIFYs only while a registration here has not
-- expired (times are the database's clock, so processes need not agree on theirs).
CREATE TABLE event_followers (
    follower_id   TEXT COLLATE "C" PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);
