import Foundation
public import HeraldSQL
import HeraldService
import NotificationHubs

/// herald-registration's schema, both databases' histories in one list (names are never changed
/// once released). The tables end up with the same columns on both: `registration` (tutorial
/// registrations, NH installations and their templates, NH registrations) and `registration_tag`
/// (the (tag, registration_id) key every audience is read from). PostgreSQL's ids and tags are in
/// the "C" collation, so keyset pages compare and sort bytes, as SQLite does; its `seq` column is
/// SQLite's rowid (the order rows were made in).
public enum RegistrationSchema {
    public static let schema = SQLSchema([
        SQLMigration(
            postgres: nil, sqlite: "v1", [],
            sqliteOnly: [
                """
                CREATE TABLE registration (
                    id TEXT PRIMARY KEY NOT NULL,
                    owner TEXT NOT NULL,
                    platform INTEGER NOT NULL DEFAULT 0,
                    handle TEXT NOT NULL DEFAULT '',
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL
                )
                """,
                "CREATE INDEX registration_owner_handle ON registration(owner, handle)",
                """
                CREATE TABLE registration_tag (
                    tag TEXT NOT NULL,
                    registration_id TEXT NOT NULL REFERENCES registration(id) ON DELETE CASCADE,
                    PRIMARY KEY (tag, registration_id)
                ) WITHOUT ROWID
                """,
                "CREATE INDEX registration_tag_registration ON registration_tag(registration_id)",
            ]),
        // RemoveHandle looks registrations up by handle alone.
        SQLMigration(
            postgres: nil, sqlite: "v2-handle-index", [],
            sqliteOnly: ["CREATE INDEX registration_handle ON registration(handle)"]),
        // Hubs: every device belongs to one; the tutorial's to "default". An NH
        // installation is a registration row too ("i-…" id, no owner), so audiences see both
        // alike; its NH JSON is kept whole in `document` (templates, push variables).
        SQLMigration(
            postgres: nil, sqlite: "v3-hubs-installations", [],
            sqliteOnly: [
                "ALTER TABLE registration ADD COLUMN hub TEXT NOT NULL DEFAULT 'default'",
                "ALTER TABLE registration ADD COLUMN installation_id TEXT",
                "ALTER TABLE registration ADD COLUMN user_id TEXT",
                "ALTER TABLE registration ADD COLUMN document BLOB",
                "ALTER TABLE registration ADD COLUMN expired INTEGER NOT NULL DEFAULT 0",
                """
                CREATE UNIQUE INDEX registration_installation ON registration(hub, installation_id)
                    WHERE installation_id IS NOT NULL
                """,
            ]),
        // NH's template registrations: each installation template is a row of its own
        // ("t-…", template_name set, parent_id its installation's row, its JSON in `document`)
        // carrying the installation's tags plus the template's tags and name, so a template send's
        // tag expression matches each template on its own, in SQL, as NH does. Installations stored
        // before carry their templates in their document only: their rows are written here.
        SQLMigration(
            postgres: nil, sqlite: "v4-installation-templates", [],
            sqliteOnly: [
                "ALTER TABLE registration ADD COLUMN template_name TEXT",
                "ALTER TABLE registration ADD COLUMN parent_id TEXT REFERENCES registration(id) ON DELETE CASCADE",
                // Not partial: SQLite looks children up through it when a row is deleted (the cascade).
                "CREATE INDEX registration_parent ON registration(parent_id)",
            ],
            sqliteData: { session in
                for row in try session.query(
                    "SELECT id, hub, document, expired, updated_at FROM registration WHERE installation_id IS NOT NULL")
                {
                    guard let installation = try? Installation.stored(try row[2]), !installation.templates.isEmpty
                    else { continue }
                    for statement in InstallationRows.templates(
                        of: installation, parentID: try row[0], hub: try row[1], expired: try row[3],
                        now: try row[4])
                    {
                        try session.execute(statement)
                    }
                }
            }),
        SQLMigration(
            postgres: "registration-v1", sqlite: nil, [],
            postgresOnly: [
                """
                CREATE TABLE registration (
                    id TEXT COLLATE "C" PRIMARY KEY,
                    seq BIGINT GENERATED ALWAYS AS IDENTITY,
                    owner TEXT NOT NULL,
                    platform INTEGER NOT NULL DEFAULT 0,
                    handle TEXT NOT NULL DEFAULT '',
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    hub TEXT NOT NULL DEFAULT 'default',
                    installation_id TEXT COLLATE "C",
                    user_id TEXT,
                    document BYTEA,
                    expired INTEGER NOT NULL DEFAULT 0,
                    template_name TEXT,
                    parent_id TEXT COLLATE "C" REFERENCES registration(id) ON DELETE CASCADE
                )
                """,
                "CREATE INDEX registration_owner_handle ON registration (owner, handle)",
                "CREATE INDEX registration_handle ON registration (handle)",
                "CREATE INDEX registration_hub_id ON registration (hub, id)",
                "CREATE UNIQUE INDEX registration_installation ON registration (hub, installation_id) WHERE installation_id IS NOT NULL",
                "CREATE INDEX registration_parent ON registration (parent_id)",
                """
                CREATE TABLE registration_tag (
                    tag TEXT COLLATE "C" NOT NULL,
                    registration_id TEXT COLLATE "C" NOT NULL REFERENCES registration(id) ON DELETE CASCADE,
                    PRIMARY KEY (tag, registration_id)
                )
                """,
                "CREATE INDEX registration_tag_registration ON registration_tag (registration_id)",
            ]),
        // NH registrations (HubRegistrations.swift says how a row holds one).
        SQLMigration(
            postgres: "registration-v2-hub-registrations", sqlite: "v5-hub-registrations",
            [
                "ALTER TABLE registration ADD COLUMN nh_id TEXT\(SQLFragment(sqlite: "", postgres: " COLLATE \"C\""))",
                "ALTER TABLE registration ADD COLUMN etag \(.int64) NOT NULL DEFAULT 0",
                "ALTER TABLE registration ADD COLUMN nh_document \(.bytes)",
                "CREATE UNIQUE INDEX registration_nh ON registration (hub, nh_id) WHERE nh_id IS NOT NULL",
            ]),
        // A page of a person's own rows in id order: an export or erase reads the next
        // `limit` of them, not all of them for every page (RegistrationErasure.pageIDs).
        SQLMigration(
            postgres: "registration-v3-owner-id", sqlite: "v6-owner-id",
            ["CREATE INDEX registration_owner_id ON registration (owner, id)"]),
    ])
}
