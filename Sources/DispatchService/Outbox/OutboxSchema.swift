import HeraldSQL

/// herald-dispatch's schema, for both databases: the outbox, the inbox and hubs' credentials.
///
/// The two histories were released apart and keep their names (SQLite's `outbox-…` and `inbox-…`,
/// PostgreSQL's `dispatch-…`); names are never changed once released. Since `outbox-v14`, which
/// gave SQLite PostgreSQL's leases and staging, the tables are the same on both, and a step that
/// changes them is written once for both.
public enum DispatchSchema {
    public static let schema = SQLSchema([
        // SQLite's history.
        SQLMigration(
            postgres: nil, sqlite: "notification-v1", [],
            sqliteOnly: [
                """
                CREATE TABLE notification (
                    id TEXT PRIMARY KEY NOT NULL,
                    sender TEXT NOT NULL,
                    target_user TEXT NOT NULL,
                    target_tag TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL
                );
                CREATE TABLE notification_platform (
                    notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    success INTEGER NOT NULL,
                    failure INTEGER NOT NULL,
                    PRIMARY KEY (notification_id, platform)
                ) WITHOUT ROWID;
                """
            ]),
        SQLMigration(
            postgres: nil, sqlite: "outbox-v1", [],
            sqliteOnly: [
                """
                CREATE TABLE outbox_payload (
                    notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    headers TEXT NOT NULL,
                    body BLOB NOT NULL,
                    expires_at INTEGER NOT NULL,
                    collapse_id TEXT NOT NULL,
                    PRIMARY KEY (notification_id, platform)
                ) WITHOUT ROWID;
                CREATE TABLE delivery (
                    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                    notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    leased INTEGER NOT NULL DEFAULT 0,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at INTEGER NOT NULL,
                    give_up_at INTEGER NOT NULL,
                    last_status INTEGER NOT NULL DEFAULT 0,
                    reason TEXT NOT NULL DEFAULT '',
                    handle_removed INTEGER NOT NULL DEFAULT 0,
                    updated_at INTEGER NOT NULL
                );
                -- 1 is DeliveryState.pending: the claim queries interpolate the same number, so SQLite uses it.
                CREATE INDEX delivery_due ON delivery(next_attempt_at) WHERE state = 1 AND leased = 0;
                -- ListDeliveries' order. Not (notification_id, state): every result would move its entry.
                CREATE INDEX delivery_notification ON delivery(notification_id, sequence);
                -- Counters kept by record(), so an outcome costs a few rows however large the send.
                ALTER TABLE notification_platform ADD COLUMN pending INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE notification_platform ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE notification_platform ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE notification_failure (
                    notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    reason TEXT NOT NULL,
                    count INTEGER NOT NULL,
                    PRIMARY KEY (notification_id, platform, reason)
                ) WITHOUT ROWID;
                CREATE TABLE handle_removal (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    invalid_since INTEGER NOT NULL,
                    created_at INTEGER NOT NULL
                );
                """
            ]),
        // Delivery options as typed columns instead of a JSON list of header strings, and the expiry in
        // Unix ms like every other time Herald stores. Rows written before are carried over.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v2-delivery-options", [],
            sqliteOnly: [
                """
                ALTER TABLE outbox_payload ADD COLUMN push_type TEXT NOT NULL DEFAULT '';
                ALTER TABLE outbox_payload ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE outbox_payload ADD COLUMN content_type TEXT NOT NULL DEFAULT '';
                UPDATE outbox_payload SET
                    push_type = COALESCE((SELECT value ->> 1 FROM json_each(headers)
                                          WHERE value ->> 0 IN ('apns-push-type', 'x-wns-type')), ''),
                    priority = COALESCE((SELECT CASE value ->> 0 WHEN 'apns-priority' THEN CAST(value ->> 1 AS INTEGER)
                                                 ELSE CASE value ->> 1 WHEN 'high' THEN 10 WHEN 'normal' THEN 5 WHEN 'low' THEN 1 END END
                                         FROM json_each(headers) WHERE value ->> 0 IN ('apns-priority', 'urgency')), 0),
                    content_type = COALESCE((SELECT value ->> 1 FROM json_each(headers) WHERE value ->> 0 = 'content-type'), ''),
                    expires_at = expires_at * 1000;
                ALTER TABLE outbox_payload RENAME COLUMN expires_at TO expires_at_ms;
                ALTER TABLE outbox_payload DROP COLUMN headers;
                """
            ]),
        // Each send belongs to a hub, whose credentials deliver it.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v3-hubs", [],
            sqliteOnly: [
                """
                ALTER TABLE notification ADD COLUMN hub TEXT NOT NULL DEFAULT 'default';
                CREATE TABLE hub_credential (
                    hub TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    settings TEXT NOT NULL,
                    updated_at INTEGER NOT NULL,
                    PRIMARY KEY (hub, platform)
                ) WITHOUT ROWID;
                """
            ]),
        // When a send started and finished, for Notification Hubs' per-message telemetry.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v4-telemetry", [],
            sqliteOnly: [
                """
                ALTER TABLE notification ADD COLUMN started_at INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE notification ADD COLUMN finished_at INTEGER NOT NULL DEFAULT 0;
                -- Completed, Abandoned, NoTargetFound: the finished states when this migration was written.
                UPDATE notification SET finished_at = updated_at WHERE state IN (3, 4, 5);
                """
            ]),
        // Scheduled sends: the request waits here, its notification SCHEDULED, until
        // it is due; firing deletes the row in the transaction that enqueues the deliveries.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v5-scheduled", [],
            sqliteOnly: [
                """
                CREATE TABLE scheduled_send (
                    notification_id TEXT PRIMARY KEY NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    fire_at INTEGER NOT NULL,
                    request BLOB NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX scheduled_send_due ON scheduled_send(fire_at);
                """
            ]),
        // A template send stores one payload per distinct rendered template: the
        // variant joins the payload's key, and each delivery names its variant. SQLite cannot
        // change a primary key in place: the table is rebuilt.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v6-payload-variants", [],
            sqliteOnly: [
                """
                CREATE TABLE outbox_payload_new (
                    notification_id TEXT NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    variant INTEGER NOT NULL DEFAULT 0,
                    body BLOB NOT NULL,
                    collapse_id TEXT NOT NULL,
                    push_type TEXT NOT NULL DEFAULT '',
                    priority INTEGER NOT NULL DEFAULT 0,
                    content_type TEXT NOT NULL DEFAULT '',
                    expires_at_ms INTEGER NOT NULL,
                    PRIMARY KEY (notification_id, platform, variant)
                ) WITHOUT ROWID;
                INSERT INTO outbox_payload_new (notification_id, platform, variant, body, collapse_id, push_type, priority,
                                                content_type, expires_at_ms)
                    SELECT notification_id, platform, 0, body, collapse_id, push_type, priority, content_type, expires_at_ms
                    FROM outbox_payload;
                DROP TABLE outbox_payload;
                ALTER TABLE outbox_payload_new RENAME TO outbox_payload;
                ALTER TABLE delivery ADD COLUMN variant INTEGER NOT NULL DEFAULT 0;
                """
            ]),
        // A large audience spills here while it streams in, so dispatch never holds a million
        // targets in memory; the send's commit moves the rows into `delivery` (see
        // ``Outbox/stage(_:to:)``). Rows only live between a send's start and its commit.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v7-audience-staging", [],
            sqliteOnly: [
                """
                CREATE TABLE audience_staging (
                    notification_id TEXT NOT NULL,
                    position INTEGER NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    PRIMARY KEY (notification_id, position)
                ) WITHOUT ROWID;
                """
            ]),
        // The console's reads: a hub's recent sends, newest first, and its minutes.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v8-sends-by-hub", [],
            sqliteOnly: [
                "CREATE INDEX notification_hub_created ON notification(hub, created_at, id)"
            ]),
        // The oldest send not finished, read each second for herald_outbox_oldest_age_seconds:
        // only open sends are in the index (1 enqueued, 2 processing).
        SQLMigration(
            postgres: nil, sqlite: "outbox-v9-open-sends", [],
            sqliteOnly: [
                "CREATE INDEX notification_open ON notification(created_at) WHERE state IN (1, 2)"
            ]),
        // The caller's request body, for NH telemetry's NotificationBody.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v10-original-body", [],
            sqliteOnly: [
                "ALTER TABLE notification ADD COLUMN original_body BLOB NOT NULL DEFAULT x''"
            ]),
        // The W3C traceparent of the span that made the send ('' when not traced): its
        // deliveries' spans join that trace, however much later and on whichever replica.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v11-trace-parent", [],
            sqliteOnly: [
                "ALTER TABLE notification ADD COLUMN trace_parent TEXT NOT NULL DEFAULT ''"
            ]),
        // A template send's audience spills too: each staged row keeps its payload variant.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v12-staging-variant", [],
            sqliteOnly: [
                "ALTER TABLE audience_staging ADD COLUMN variant INTEGER NOT NULL DEFAULT 0"
            ]),
        // A claim names its platforms (the inbox's, or the senders'): keyed by next_attempt_at
        // alone, a claim for the inbox walked every due APNs row of a backlog to find none of
        // its own, once per batch. Keyed by platform first, each platform is one ordered range.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v13-due-by-platform", [],
            sqliteOnly: [
                """
                DROP INDEX delivery_due;
                CREATE INDEX delivery_due ON delivery(platform, next_attempt_at) WHERE state = 1 AND leased = 0;
                """
            ]),
        // PostgreSQL's leases, so both databases run the same transactions: a claim names its
        // holder in `leased_by` and moves `next_attempt_at` to the lease's end, the row staying
        // in `delivery_due`. Rows leased before this step are taken back at the next start, as
        // any lease of the one process. A due scheduled send is taken (`taken_until`,
        // `taken_by`), and staged rows are keyed by their staging attempt, with when they were
        // staged; staged rows only live during a send, so that table is made anew.
        SQLMigration(
            postgres: nil, sqlite: "outbox-v14-expiring-leases", [],
            sqliteOnly: [
                """
                ALTER TABLE delivery ADD COLUMN leased_by TEXT NOT NULL DEFAULT '';
                UPDATE delivery SET leased_by = 'before-outbox-v14' WHERE leased = 1 AND state = 1;
                DROP INDEX delivery_due;
                ALTER TABLE delivery DROP COLUMN leased;
                CREATE INDEX delivery_due ON delivery(platform, next_attempt_at) WHERE state = 1;
                ALTER TABLE scheduled_send ADD COLUMN taken_until INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE scheduled_send ADD COLUMN taken_by TEXT NOT NULL DEFAULT '';
                DROP TABLE audience_staging;
                CREATE TABLE audience_staging (
                    staging_key TEXT NOT NULL,
                    position INTEGER NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    staged_at INTEGER NOT NULL,
                    variant INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (staging_key, position)
                ) WITHOUT ROWID;
                """
            ]),
        SQLMigration(
            postgres: nil, sqlite: "inbox-v1", [],
            sqliteOnly: [
                """
                CREATE TABLE inbox (
                    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                    notification_id TEXT NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    headers TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    recorded_at INTEGER NOT NULL
                );
                """
            ]),
        SQLMigration(
            postgres: nil, sqlite: "inbox-v2-handle-index", [],
            sqliteOnly: [
                "CREATE INDEX inbox_handle ON inbox(handle, sequence)"
            ]),
        // PostgreSQL's history.
        SQLMigration(
            postgres: "dispatch-v1", sqlite: nil, [],
            postgresOnly: [
                """
                CREATE TABLE notification (
                    id TEXT COLLATE "C" PRIMARY KEY,
                    sender TEXT NOT NULL,
                    target_user TEXT NOT NULL,
                    target_tag TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    hub TEXT NOT NULL,
                    started_at BIGINT NOT NULL DEFAULT 0,
                    finished_at BIGINT NOT NULL DEFAULT 0
                )
                """,
                "CREATE INDEX notification_updated ON notification (updated_at)",
                """
                CREATE TABLE notification_platform (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    success BIGINT NOT NULL DEFAULT 0,
                    failure BIGINT NOT NULL DEFAULT 0,
                    pending BIGINT NOT NULL DEFAULT 0,
                    removed BIGINT NOT NULL DEFAULT 0,
                    retries BIGINT NOT NULL DEFAULT 0,
                    PRIMARY KEY (notification_id, platform)
                )
                """,
                """
                CREATE TABLE notification_failure (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    reason TEXT NOT NULL,
                    count BIGINT NOT NULL,
                    PRIMARY KEY (notification_id, platform, reason)
                )
                """,
                """
                CREATE TABLE outbox_payload (
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    platform INTEGER NOT NULL,
                    variant INTEGER NOT NULL,
                    body BYTEA NOT NULL,
                    collapse_id TEXT NOT NULL,
                    push_type TEXT NOT NULL,
                    priority INTEGER NOT NULL,
                    content_type TEXT NOT NULL,
                    expires_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (notification_id, platform, variant)
                )
                """,
                """
                CREATE TABLE delivery (
                    sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    notification_id TEXT COLLATE "C" NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    state INTEGER NOT NULL,
                    leased_by TEXT NOT NULL DEFAULT '',
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at BIGINT NOT NULL,
                    give_up_at BIGINT NOT NULL,
                    last_status INTEGER NOT NULL DEFAULT 0,
                    reason TEXT NOT NULL DEFAULT '',
                    handle_removed BOOLEAN NOT NULL DEFAULT false,
                    updated_at BIGINT NOT NULL,
                    variant INTEGER NOT NULL DEFAULT 0
                )
                """,
                // 1 is DeliveryState.pending. A leased row is pending too, due when its lease ends.
                "CREATE INDEX delivery_due ON delivery (next_attempt_at, sequence) WHERE state = 1",
                "CREATE INDEX delivery_notification ON delivery (notification_id, sequence)",
                """
                CREATE TABLE handle_removal (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    invalid_since BIGINT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE scheduled_send (
                    notification_id TEXT COLLATE "C" PRIMARY KEY REFERENCES notification(id) ON DELETE CASCADE,
                    fire_at BIGINT NOT NULL,
                    request BYTEA NOT NULL,
                    taken_until BIGINT NOT NULL DEFAULT 0
                )
                """,
                "CREATE INDEX scheduled_send_due ON scheduled_send (fire_at)",
                // Keyed by the staging attempt, not the send: two replicas racing to make one
                // scheduled send never mix or delete each other's rows.
                """
                CREATE TABLE audience_staging (
                    staging_key TEXT COLLATE "C" NOT NULL,
                    position INTEGER NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    message_id TEXT NOT NULL,
                    staged_at BIGINT NOT NULL,
                    PRIMARY KEY (staging_key, position)
                )
                """,
                """
                CREATE TABLE inbox (
                    sequence BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    notification_id TEXT NOT NULL,
                    registration_id TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    handle TEXT NOT NULL,
                    headers TEXT NOT NULL,
                    payload BYTEA NOT NULL,
                    recorded_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX inbox_handle ON inbox (handle, sequence)",
                "CREATE INDEX inbox_recorded ON inbox (recorded_at)",
                """
                CREATE TABLE hub_credential (
                    hub TEXT NOT NULL,
                    platform INTEGER NOT NULL,
                    settings TEXT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    PRIMARY KEY (hub, platform)
                )
                """,
            ]),
        // The console's reads: a hub's recent sends, newest first, and its minutes.
        SQLMigration(
            postgres: "dispatch-v2-sends-by-hub", sqlite: nil, [],
            postgresOnly: ["CREATE INDEX notification_hub_created ON notification (hub, created_at, id)"]),
        // The oldest send not finished, for herald_outbox_oldest_age_seconds (1 enqueued, 2 processing).
        SQLMigration(
            postgres: "dispatch-v3-open-sends", sqlite: nil, [],
            postgresOnly: ["CREATE INDEX notification_open ON notification (created_at) WHERE state IN (1, 2)"]),
        // The caller's request body, for NH telemetry's NotificationBody.
        SQLMigration(
            postgres: "dispatch-v4-original-body", sqlite: nil, [],
            postgresOnly: ["ALTER TABLE notification ADD COLUMN original_body BYTEA NOT NULL DEFAULT ''::bytea"]),
        // The traceparent of the span that made the send (Outbox's outbox-v11-trace-parent).
        SQLMigration(
            postgres: "dispatch-v5-trace-parent", sqlite: nil, [],
            postgresOnly: ["ALTER TABLE notification ADD COLUMN trace_parent TEXT NOT NULL DEFAULT ''"]),
        // The replica that took a due scheduled send, so its restart takes it back (recoverLeases).
        SQLMigration(
            postgres: "dispatch-v6-scheduled-taken-by", sqlite: nil, [],
            postgresOnly: ["ALTER TABLE scheduled_send ADD COLUMN taken_by TEXT NOT NULL DEFAULT ''"]),
        // A template send's audience spills too: each staged row keeps its payload variant
        // (Outbox's outbox-v12-staging-variant).
        SQLMigration(
            postgres: "dispatch-v7-staging-variant", sqlite: nil, [],
            postgresOnly: ["ALTER TABLE audience_staging ADD COLUMN variant INTEGER NOT NULL DEFAULT 0"]),
        // A claim names its platforms: each is one ordered range, however many rows other
        // platforms have due (Outbox's outbox-v13-due-by-platform).
        SQLMigration(
            postgres: "dispatch-v8-due-by-platform", sqlite: nil, [],
            postgresOnly: [
                "DROP INDEX delivery_due",
                "CREATE INDEX delivery_due ON delivery (platform, next_attempt_at, sequence) WHERE state = 1",
            ]),
        // A lease per claimed batch: renewing a batch rewrites its one `delivery_lease`
        // row, not each of its deliveries (and their `delivery_due` entries). A delivery's
        // `next_attempt_at` is still its claim's first lease end; past it, the delivery is taken
        // over only if its batch's lease has ended too. Rows leased before this step have no
        // lease row, so they are taken over when their `next_attempt_at` passes, as before.
        SQLMigration(
            postgres: "dispatch-v9-batch-leases", sqlite: "outbox-v15-batch-leases",
            ["ALTER TABLE delivery ADD COLUMN lease_id BIGINT NOT NULL DEFAULT 0"],
            sqliteOnly: [
                """
                CREATE TABLE delivery_lease (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    holder TEXT NOT NULL,
                    expires_at INTEGER NOT NULL
                )
                """
            ],
            postgresOnly: [
                """
                CREATE TABLE delivery_lease (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    holder TEXT NOT NULL,
                    expires_at BIGINT NOT NULL
                )
                """
            ]),
        // Fair claims: each delivery names its send's hub and lane (0 a one-person
        // send, 1 the rest), and `delivery_due` is keyed by them, so a claim reads each hub's
        // lanes as ordered ranges of their own: a hub's broadcast backlog no longer stands in front
        // of another hub's rows, nor of its own one-person sends. Pending rows take their send's
        // hub; finished rows keep 'default' (nothing claims them again).
        SQLMigration(
            postgres: "dispatch-v10-fair-claims", sqlite: "outbox-v16-fair-claims", [],
            sqliteOnly: [
                """
                ALTER TABLE delivery ADD COLUMN hub TEXT NOT NULL DEFAULT 'default';
                ALTER TABLE delivery ADD COLUMN lane INTEGER NOT NULL DEFAULT 1;
                UPDATE delivery SET hub = (SELECT n.hub FROM notification n WHERE n.id = delivery.notification_id)
                WHERE state = 1;
                DROP INDEX delivery_due;
                CREATE INDEX delivery_due ON delivery(platform, hub, lane, next_attempt_at, sequence) WHERE state = 1;
                """
            ],
            postgresOnly: [
                #"ALTER TABLE delivery ADD COLUMN hub TEXT COLLATE "C" NOT NULL DEFAULT 'default'"#,
                "ALTER TABLE delivery ADD COLUMN lane INTEGER NOT NULL DEFAULT 1",
                """
                UPDATE delivery SET hub = n.hub FROM notification n
                WHERE n.id = delivery.notification_id AND delivery.state = 1
                """,
                "DROP INDEX delivery_due",
                "CREATE INDEX delivery_due ON delivery (platform, hub, lane, next_attempt_at, sequence) WHERE state = 1",
            ]),
        pushLimits,
        hubWeight,
        // Hubs' push credentials as SetHubCredentials carries them, one platform's message per row,
        // not a JSON object of named settings: HubCredentialStore converts the rows
        // stored before on its next read; `settings` is '' after that, and is dropped from 2027-03-01.
        SQLMigration(
            postgres: "dispatch-v13-typed-credentials", sqlite: "outbox-v19-typed-credentials",
            ["ALTER TABLE hub_credential ADD COLUMN credentials \(.bytes)"]),
    ])

    /// Brings a SQLite file to ``schema`` (synchronously: ``Outbox/init(db:replica:lease:now:)``
    /// and ``InboxProvider/init(db:)`` run it, whichever is made first).
    static func migrate(_ db: SQLiteDatabase) throws {
        try HeraldDatabase.migrate(SQLiteDatabase.migrator(for: schema), db.writer)
    }
}
