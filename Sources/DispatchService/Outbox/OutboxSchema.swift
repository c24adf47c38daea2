public import GRDB

/// The outbox's tables and their migrations.
extension Outbox {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("notification-v1") { db in
            try db.execute(
                sql: """
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
                    """)
        }
        migrator.registerMigration("outbox-v1") { db in
            try db.execute(
                sql: """
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
                    """)
        }
        // Delivery options as typed columns instead of a JSON list of header strings, and the expiry in
        // Unix ms like every other time Herald stores. Rows written before are carried over.
        migrator.registerMigration("outbox-v2-delivery-options") { db in
            try db.execute(
                sql: """
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
                    """)
        }
        migrator.registerMigration("outbox-v3-hubs") { db in
            // Each send belongs to a hub, whose credentials deliver it (issue 15).
            try db.execute(
                sql: """
                    ALTER TABLE notification ADD COLUMN hub TEXT NOT NULL DEFAULT 'default';
                    CREATE TABLE hub_credential (
                        hub TEXT NOT NULL,
                        platform INTEGER NOT NULL,
                        settings TEXT NOT NULL,
                        updated_at INTEGER NOT NULL,
                        PRIMARY KEY (hub, platform)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("outbox-v4-telemetry") { db in
            // When a send started and finished, for Notification Hubs' per-message telemetry (issue 16).
            try db.execute(
                sql: """
                    ALTER TABLE notification ADD COLUMN started_at INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notification ADD COLUMN finished_at INTEGER NOT NULL DEFAULT 0;
                    -- Completed, Abandoned, NoTargetFound: the finished states when this migration was written.
                    UPDATE notification SET finished_at = updated_at WHERE state IN (3, 4, 5);
                    """)
        }
        migrator.registerMigration("outbox-v5-scheduled") { db in
            // Scheduled sends (issue 16): the request waits here, its notification SCHEDULED, until
            // it is due; firing deletes the row in the transaction that enqueues the deliveries.
            try db.execute(
                sql: """
                    CREATE TABLE scheduled_send (
                        notification_id TEXT PRIMARY KEY NOT NULL REFERENCES notification(id) ON DELETE CASCADE,
                        fire_at INTEGER NOT NULL,
                        request BLOB NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX scheduled_send_due ON scheduled_send(fire_at);
                    """)
        }
        migrator.registerMigration("outbox-v6-payload-variants") { db in
            // A template send stores one payload per distinct rendered template (issue 16): the
            // variant joins the payload's key, and each delivery names its variant. SQLite cannot
            // change a primary key in place: the table is rebuilt.
            try db.execute(
                sql: """
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
                    """)
        }
        migrator.registerMigration("outbox-v7-audience-staging") { db in
            // A large audience spills here while it streams in, so dispatch never holds a million
            // targets in memory; the send's commit moves the rows into `delivery` (see
            // ``Outbox/stage(_:to:)``). Rows only live between a send's start and its commit.
            try db.execute(
                sql: """
                    CREATE TABLE audience_staging (
                        notification_id TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        registration_id TEXT NOT NULL,
                        platform INTEGER NOT NULL,
                        handle TEXT NOT NULL,
                        message_id TEXT NOT NULL,
                        PRIMARY KEY (notification_id, position)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("outbox-v8-sends-by-hub") { db in
            // The console's reads (issue 18): a hub's recent sends, newest first, and its minutes.
            try db.execute(sql: "CREATE INDEX notification_hub_created ON notification(hub, created_at, id)")
        }
        migrator.registerMigration("outbox-v9-open-sends") { db in
            // The oldest send not finished, read each second for herald_outbox_oldest_age_seconds:
            // only open sends are in the index (1 enqueued, 2 processing).
            try db.execute(sql: "CREATE INDEX notification_open ON notification(created_at) WHERE state IN (1, 2)")
        }
        migrator.registerMigration("outbox-v10-original-body") { db in
            // The caller's request body, for NH telemetry's NotificationBody.
            try db.execute(sql: "ALTER TABLE notification ADD COLUMN original_body BLOB NOT NULL DEFAULT x''")
        }
        migrator.registerMigration("outbox-v11-trace-parent") { db in
            // The W3C traceparent of the span that made the send ('' when not traced): its
            // deliveries' spans join that trace, however much later and on whichever replica.
            try db.execute(sql: "ALTER TABLE notification ADD COLUMN trace_parent TEXT NOT NULL DEFAULT ''")
        }
        migrator.registerMigration("outbox-v12-staging-variant") { db in
            // A template send's audience spills too: each staged row keeps its payload variant.
            try db.execute(sql: "ALTER TABLE audience_staging ADD COLUMN variant INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("outbox-v13-due-by-platform") { db in
            // A claim names its platforms (the inbox's, or the senders'): keyed by next_attempt_at
            // alone, a claim for the inbox walked every due APNs row of a backlog to find none of
            // its own, once per batch. Keyed by platform first, each platform is one ordered range.
            try db.execute(
                sql: """
                    DROP INDEX delivery_due;
                    CREATE INDEX delivery_due ON delivery(platform, next_attempt_at) WHERE state = 1 AND leased = 0;
                    """)
        }
        return migrator
    }
}
