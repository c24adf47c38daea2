import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldService
import NIOCore
import PostgresNIO

/// Registrations and installations in PostgreSQL, for replicas of herald-registration that share
/// one database. The same tables and columns as SQLite's (so the audience and listing queries are
/// shared, ``RegistrationSQL``), with ids and tags in the "C" collation: keyset pages compare and
/// sort bytes, as SQLite does.
///
/// Where SQLite's single writer serialised two replicas' writes, a transaction takes an advisory
/// lock on what it changes: the (owner, handle) of a POST, the (hub, installation id) of a PUT or
/// PATCH. The installation limit of a hub is counted in the transaction but not locked across
/// installations, so replicas racing at the limit may pass it by a few.
public final class PostgresRegistrationStore: RegistrationStore {
    let db: HeraldPostgres
    /// How long an id from POST api/register waits for its first PUT, in ms.
    private let pendingTTL: Int64
    private let now: @Sendable () -> Int64

    public init(
        db: HeraldPostgres, pendingTTL: Duration = .seconds(24 * 3600),
        now: @escaping @Sendable () -> Int64 = unixMillis
    )
        async throws
    {
        self.db = db
        self.pendingTTL = pendingTTL.wholeMilliseconds
        self.now = now
        try await db.migrate(Self.migrations)
    }

    /// The schema's history; names are never changed once released.
    public static let migrations: [PostgresMigration] = [
        .heartbeat,
        PostgresMigration(
            "registration-v1",
            [
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
        PostgresMigration(
            "registration-v2-hub-registrations",
            [
                "ALTER TABLE registration ADD COLUMN nh_id TEXT COLLATE \"C\"",
                "ALTER TABLE registration ADD COLUMN etag BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE registration ADD COLUMN nh_document BYTEA",
                "CREATE UNIQUE INDEX registration_nh ON registration (hub, nh_id) WHERE nh_id IS NOT NULL",
            ]),
    ]

    // MARK: tutorial registrations

    nonisolated(nonsending) public func createID(owner: String, handle: String) async throws -> String {
        let now = self.now()
        return try await db.transaction { connection in
            if !handle.isEmpty {
                let key = "\(owner)\u{1}\(handle)"
                try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\(key)))", logger: db.logger)
                let ids = try await connection.query(
                    "SELECT id FROM registration WHERE owner = \(owner) AND handle = \(handle) ORDER BY created_at, seq",
                    logger: db.logger
                ).collect().map { try $0.decode(String.self) }
                if let first = ids.first {
                    let duplicates = Array(ids.dropFirst())
                    if !duplicates.isEmpty {
                        try await connection.query(
                            "DELETE FROM registration WHERE id = ANY(\(duplicates))", logger: db.logger)
                    }
                    return first
                }
            }
            let id = RegistrationSQL.newID()
            try await connection.query(
                "INSERT INTO registration (id, owner, created_at, updated_at) VALUES (\(id), \(owner), \(now), \(now))",
                logger: db.logger)
            return id
        }
    }

    nonisolated(nonsending) public func upsert(
        owner: String, id: String, platform: Platform, handle: String, tags: [String]
    )
        async throws -> Registration
    {
        let now = self.now()
        let allTags = tags + [RegistrationRules.userTag(owner)]
        let platformValue = Int32(platform.rawValue)
        let cutoff = now - pendingTTL
        try await db.transaction { connection in
            // A pending id (never PUT: platform 0) only within its TTL.
            let updated = try await connection.query(
                """
                UPDATE registration SET platform = \(platformValue), handle = \(handle), updated_at = \(now)
                WHERE id = \(id) AND owner = \(owner) AND (platform != 0 OR created_at > \(cutoff)) RETURNING id
                """, logger: db.logger
            ).collect()
            guard updated.count == 1 else { throw ServiceError.notFound("registration \(id) not found") }
            try await connection.query("DELETE FROM registration_tag WHERE registration_id = \(id)", logger: db.logger)
            try await connection.query(
                "INSERT INTO registration_tag (tag, registration_id) SELECT unnest(\(allTags)::text[]), \(id) ON CONFLICT DO NOTHING",
                logger: db.logger)
        }
        return Registration(
            registrationID: id, owner: owner, platform: platform, handle: handle, tags: allTags, updatedAtUnixMs: now)
    }

    nonisolated(nonsending) public func delete(owner: String, id: String) async throws {
        let rows = try await db.rows("DELETE FROM registration WHERE id = \(id) AND owner = \(owner) RETURNING id")
        guard rows.count == 1 else { throw ServiceError.notFound("registration \(id) not found") }
    }

    nonisolated(nonsending) public func list(owner: String) async throws -> [Registration] {
        let rows = try await db.rows(
            """
            SELECT r.id, r.owner, r.platform, r.handle, r.updated_at,
                   coalesce((SELECT array_agg(t.tag ORDER BY t.tag) FROM registration_tag t WHERE t.registration_id = r.id), '{}')
            FROM registration r WHERE r.owner = \(owner) ORDER BY r.created_at, r.seq
            """)
        return try rows.map { row in
            let (id, owner, platform, handle, updatedAt, tags) = try row.decode(
                (String, String, Int32, String, Int64, [String]).self)
            return Registration(
                registrationID: id, owner: owner, platform: Platform(rawValue: platform), handle: handle, tags: tags,
                updatedAtUnixMs: updatedAt)
        }
    }

    nonisolated(nonsending) public func removeHandle(platform: Platform, handle: String, invalidSince: Int64)
        async throws -> Int
    {
        let platformValue = Int32(platform.rawValue)
        return try await db.transaction { connection in
            // Installations expire (their templates go quiet with them, counted once, with the
            // installation); tutorial registrations are deleted.
            let expired = try await connection.query(
                """
                UPDATE registration SET expired = 1
                WHERE handle = \(handle) AND platform = \(platformValue) AND (\(invalidSince) = 0 OR updated_at <= \(invalidSince))
                    AND installation_id IS NOT NULL AND expired = 0
                RETURNING id
                """, logger: db.logger
            ).collect().count
            try await connection.query(
                """
                UPDATE registration SET expired = 1
                WHERE handle = \(handle) AND platform = \(platformValue) AND (\(invalidSince) = 0 OR updated_at <= \(invalidSince))
                    AND parent_id IS NOT NULL AND expired = 0
                """, logger: db.logger)
            let deleted = try await connection.query(
                """
                DELETE FROM registration
                WHERE handle = \(handle) AND platform = \(platformValue) AND (\(invalidSince) = 0 OR updated_at <= \(invalidSince))
                    AND installation_id IS NULL AND parent_id IS NULL
                RETURNING id
                """, logger: db.logger
            ).collect().count
            return expired + deleted
        }
    }

    nonisolated(nonsending) public func purgePending() async throws -> Int {
        try await db.rows(
            "DELETE FROM registration WHERE platform = 0 AND created_at <= \(now() - pendingTTL) RETURNING id"
        ).count
    }

    nonisolated(nonsending) public func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) async throws -> [Registration] {
        let statement = RegistrationSQL.audience(
            .postgres, driver: driver, expression: expression, platform: platform, hub: hub, templates: templates,
            after: after,
            limit: limit)
        return try await db.rows(statement.postgresQuery).map { row in
            var registration: Registration
            if templates {
                let (id, owner, platform, handle, updatedAt, hub, installationID, templateName, document) =
                    try row.decode(
                        (String, String, Int32, String, Int64, String, String?, String?, ByteBuffer?).self)
                registration = Self.registration(id, owner, platform, handle, updatedAt, hub, installationID)
                registration.templateName = templateName ?? ""
                registration.templateJson = document.map { String(buffer: $0) } ?? ""
            } else {
                let (id, owner, platform, handle, updatedAt, hub, installationID) = try row.decode(
                    (String, String, Int32, String, Int64, String, String?).self)
                registration = Self.registration(id, owner, platform, handle, updatedAt, hub, installationID)
            }
            return registration
        }
    }

    nonisolated(nonsending) public func devices(
        hub: String, user: String?, expression: TagExpression?, platform: Platform, handlePrefix: String?,
        after: String, limit: Int
    ) async throws -> [Registration] {
        let statement = RegistrationSQL.devices(
            .postgres, hub: hub, user: user, expression: expression, platform: platform, handlePrefix: handlePrefix,
            after: after,
            limit: limit)
        return try await db.rows(statement.postgresQuery).map { row in
            let (id, owner, platform, handle, updatedAt, installationID, expired, tags) = try row.decode(
                (String, String, Int32, String, Int64, String?, Int32, [String]).self)
            var registration = Self.registration(id, owner, platform, handle, updatedAt, hub, installationID)
            registration.tags = tags
            registration.expired = expired != 0
            return registration
        }
    }

    private static func registration(
        _ id: String, _ owner: String, _ platform: Int32, _ handle: String, _ updatedAt: Int64, _ hub: String,
        _ installationID: String?
    ) -> Registration {
        Registration(
            registrationID: id, owner: owner, platform: Platform(rawValue: platform), handle: handle, tags: [],
            updatedAtUnixMs: updatedAt,
            hub: hub, installationID: installationID ?? "")
    }

    // MARK: installations

    @discardableResult
    nonisolated(nonsending) public func putInstallation(
        hub: String, _ installation: Installation, maxInstallations: Int64
    )
        async throws -> Installation
    {
        let now = self.now()
        return try await db.transaction { connection in
            try await Self.lock(hub: hub, id: installation.installationID, on: connection, logger: db.logger)
            return try await Self.write(
                hub: hub, installation, maxInstallations: maxInstallations, now: now, on: connection, logger: db.logger)
        }
    }

    nonisolated(nonsending) public func patchInstallation(
        hub: String, id: String, _ change: @escaping @Sendable (inout Installation) throws -> Void
    ) async throws -> Installation {
        let now = self.now()
        return try await db.transaction { connection in
            try await Self.lock(hub: hub, id: id, on: connection, logger: db.logger)
            guard var installation = try await Self.installation(hub: hub, id: id, on: connection, logger: db.logger)
            else {
                throw ServiceError.notFound("Installation not found.")
            }
            try change(&installation)
            return try await Self.write(hub: hub, installation, now: now, on: connection, logger: db.logger)
        }
    }

    nonisolated(nonsending) public func installation(hub: String, id: String) async throws -> Installation? {
        try await db.client.withConnection { connection in
            try await Self.installation(hub: hub, id: id, on: connection, logger: db.logger)
        }
    }

    nonisolated(nonsending) public func deleteInstallation(hub: String, id: String) async throws -> Bool {
        try await !db.rows("DELETE FROM registration WHERE hub = \(hub) AND installation_id = \(id) RETURNING id")
            .isEmpty
    }

    nonisolated(nonsending) public func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) async throws -> [Installation] {
        let statement = RegistrationSQL.installations(
            .postgres, hub: hub, expression: expression, userID: userID, platform: platform, after: after, limit: limit)
        return try await db.rows(statement.postgresQuery).map(Self.installation)
    }

    nonisolated(nonsending) public func exportPage(hub: String, after: String, limit: Int) async throws
        -> (lines: [UInt8], last: String?, count: Int)
    {
        let rows = try await db.rows(
            """
            SELECT r.id, r.owner, r.platform, r.handle, r.updated_at, r.document, r.expired,
                   coalesce((SELECT array_agg(t.tag ORDER BY t.tag) FROM registration_tag t WHERE t.registration_id = r.id), '{}')
            FROM registration r
            WHERE r.hub = \(hub) AND r.id > \(after) AND r.platform != 0 AND r.template_name IS NULL ORDER BY r.id LIMIT \(limit)
            """)
        var out: [UInt8] = []
        var last: String?
        for row in rows {
            let (id, owner, platform, handle, updatedAt, document, expired, tags) = try row.decode(
                (String, String, Int32, String, Int64, ByteBuffer?, Int32, [String]).self)
            if let document {
                var installation = try Installation.stored(Array(buffer: document))
                installation.pushChannelExpired = expired != 0
                installation.lastUpdate = updatedAt
                out += try RegistrationSQL.exportLine(installation)
            } else {
                out += try RegistrationSQL.exportLine(
                    Registration(
                        registrationID: id, owner: owner, platform: Platform(rawValue: platform), handle: handle,
                        tags: tags,
                        updatedAtUnixMs: updatedAt))
            }
            last = id
        }
        return (out, last, rows.count)
    }

    nonisolated(nonsending) public func deleteHub(_ hub: String) async throws -> Int {
        try await db.deleteInBatches(batch: 10000) {
            """
            DELETE FROM registration WHERE id IN (SELECT id FROM registration WHERE hub = \(hub) LIMIT 10000 FOR UPDATE SKIP LOCKED)
            RETURNING id
            """
        }
    }

    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        try await db.deleteAll(["registration_tag", "registration"])
    }

    // MARK: NH registrations

    nonisolated(nonsending) public func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64
    ) async throws -> (HubRegistration, created: Bool) {
        let now = self.now()
        return try await db.transaction { connection in
            try await Self.lock(
                hub: hub, id: "nh\u{1}" + registration.registrationID, on: connection, logger: db.logger)
            var r = registration
            let existing = try await connection.query(
                "SELECT id, etag, created_at FROM registration WHERE hub = \(hub) AND nh_id = \(r.registrationID)",
                logger: db.logger
            ).collect().first.map { try $0.decode((String, Int64, Int64).self) }
            if existing != nil, createOnly {
                throw ServiceError(.alreadyExists, "registration \(r.registrationID) exists")
            }
            try HubRegistrationRules.checkETag(ifMatch, stored: existing?.1)
            if existing == nil, maxRegistrations > 0 {
                let count =
                    try await connection.query(
                        "SELECT count(*) FROM registration WHERE hub = \(hub) AND nh_id IS NOT NULL", logger: db.logger
                    ).collect().first?.decode(Int64.self) ?? 0
                guard count < maxRegistrations else {
                    throw ServiceError(
                        .resourceExhausted,
                        "hub \(hub) holds its limit of \(maxRegistrations) registrations (herald hubs limits \(hub))")
                }
            }
            r.etag = (existing?.1 ?? 0) + 1
            r.createdAtUnixMs = existing?.2 ?? now
            r.updatedAtUnixMs = now
            r.expired = false
            let stored = ByteBuffer(bytes: try r.serializedBytes() as [UInt8])
            let document = HubRegistrationRules.document(of: r).map { ByteBuffer(bytes: $0) }
            let templateName: String? = r.isTemplate ? r.templateName : nil
            let platform = Int32(r.platform.rawValue)
            let id = existing?.0 ?? RegistrationSQL.newID(prefix: "n-")
            if existing != nil {
                try await connection.query(
                    """
                    UPDATE registration SET platform = \(platform), handle = \(r.handle), updated_at = \(now),
                        document = \(document), expired = 0, template_name = \(templateName), etag = \(r.etag),
                        nh_document = \(stored)
                    WHERE id = \(id)
                    """, logger: db.logger)
                try await connection.query(
                    "DELETE FROM registration_tag WHERE registration_id = \(id)", logger: db.logger)
            } else {
                try await connection.query(
                    """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired,
                        template_name, nh_id, etag, nh_document)
                    VALUES (\(id), '', \(platform), \(r.handle), \(now), \(now), \(hub), \(document), 0, \(templateName),
                        \(r.registrationID), \(r.etag), \(stored))
                    """, logger: db.logger)
            }
            try await connection.query(
                "INSERT INTO registration_tag (tag, registration_id) SELECT unnest(\(r.tags)::text[]), \(id) ON CONFLICT DO NOTHING",
                logger: db.logger)
            return (r, existing == nil)
        }
    }

    nonisolated(nonsending) public func hubRegistration(hub: String, id: String) async throws -> HubRegistration? {
        try await db.rows(
            PostgresQuery(
                unsafeSQL: """
                    SELECT \(RegistrationSQL.hubRegistrationColumns) FROM registration r
                    WHERE r.hub = $1 AND (r.nh_id = $2 OR r.installation_id = $2) ORDER BY r.nh_id IS NULL LIMIT 1
                    """,
                binds: {
                    var binds = PostgresBindings()
                    binds.append(hub)
                    binds.append(id)
                    return binds
                }())
        ).first.map(Self.hubRegistration)
    }

    nonisolated(nonsending) public func deleteHubRegistration(hub: String, id: String, ifMatch: Int64) async throws {
        try await db.transaction { connection in
            let row = try await connection.query(
                """
                SELECT id, CASE WHEN nh_id IS NULL THEN updated_at ELSE etag END FROM registration
                WHERE hub = \(hub) AND (nh_id = \(id) OR installation_id = \(id)) ORDER BY nh_id IS NULL LIMIT 1 FOR UPDATE
                """, logger: db.logger
            ).collect().first?.decode((String, Int64).self)
            guard let row else { throw ServiceError.notFound("Registration not found.") }
            try HubRegistrationRules.checkETag(ifMatch, stored: row.1)
            try await connection.query("DELETE FROM registration WHERE id = \(row.0)", logger: db.logger)
        }
    }

    nonisolated(nonsending) public func listHubRegistrations(
        hub: String, handle: String?, tag: String?, after: String, limit: Int
    ) async throws -> [HubRegistration] {
        let statement = RegistrationSQL.hubRegistrations(
            .postgres, hub: hub, handle: handle, tag: tag, after: after, limit: limit)
        return try await db.rows(statement.postgresQuery).map(Self.hubRegistration)
    }

    private static func hubRegistration(_ row: PostgresRow) throws -> HubRegistration {
        let (nhDocument, installation, etag, createdAt, updatedAt, expired) = try row.decode(
            (ByteBuffer?, ByteBuffer?, Int64, Int64, Int64, Int32).self)
        return try HubRegistrationRules.stored(
            nhDocument: nhDocument.map { Array(buffer: $0) }, installation: installation.map { Array(buffer: $0) },
            etag: etag, createdAt: createdAt, updatedAt: updatedAt, expired: expired != 0)
    }

    // MARK: helpers

    /// Serialises writers of one installation across replicas until the transaction ends.
    private static func lock(hub: String, id: String, on connection: PostgresConnection, logger: Logger) async throws {
        let key = "installation\u{1}\(hub)\u{1}\(id)"
        try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\(key)))", logger: logger)
    }

    private static func write(
        hub: String, _ installation: Installation, maxInstallations: Int64 = 0, now: Int64,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> Installation {
        var installation = installation
        let existing = try await connection.query(
            "SELECT id, handle, expired FROM registration WHERE hub = \(hub) AND installation_id = \(installation.installationID)",
            logger: logger
        ).collect().first.map { try $0.decode((String, String, Int32).self) }
        if existing == nil, maxInstallations > 0 {
            let count =
                try await connection.query(
                    "SELECT count(*) FROM registration WHERE hub = \(hub) AND installation_id IS NOT NULL",
                    logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            guard count < maxInstallations else {
                throw ServiceError(
                    .resourceExhausted,
                    "hub \(hub) holds its limit of \(maxInstallations) installations (herald hubs limits \(hub))")
            }
        }
        let id = existing?.0 ?? RegistrationSQL.newID(prefix: "i-")
        // pushChannelExpired is read-only: it stays while the channel stays, and clears when it changes.
        installation.pushChannelExpired = existing.map { $0.1 == installation.pushChannel && $0.2 != 0 } ?? false
        installation.lastUpdate = now
        let document = ByteBuffer(bytes: try installation.json())
        let platform = Int32(installation.platform.rawValue)
        let expired: Int32 = installation.pushChannelExpired ? 1 : 0
        if existing == nil {
            try await connection.query(
                """
                INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, installation_id, user_id, document, expired)
                VALUES (\(id), '', \(platform), \(installation.pushChannel), \(now), \(now), \(hub), \(installation.installationID),
                        \(installation.userID), \(document), \(expired))
                """, logger: logger)
        } else {
            try await connection.query(
                """
                UPDATE registration SET platform = \(platform), handle = \(installation.pushChannel), updated_at = \(now),
                    user_id = \(installation.userID), document = \(document), expired = \(expired)
                WHERE id = \(id)
                """, logger: logger)
            try await connection.query("DELETE FROM registration_tag WHERE registration_id = \(id)", logger: logger)
        }
        try await connection.query(
            "INSERT INTO registration_tag (tag, registration_id) SELECT unnest(\(installation.audienceTags)::text[]), \(id) ON CONFLICT DO NOTHING",
            logger: logger)
        // Its templates: one row each (NH's template registrations), with the installation's
        // channel, and its tags plus the template's tags and name.
        try await connection.query("DELETE FROM registration WHERE parent_id = \(id)", logger: logger)
        for (name, template) in installation.templates.sorted(by: { $0.key < $1.key }) {
            let templateID = RegistrationSQL.newID(prefix: "t-")
            let json = ByteBuffer(string: template.wireJSON)
            try await connection.query(
                """
                INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired, template_name, parent_id)
                VALUES (\(templateID), '', \(platform), \(installation.pushChannel), \(now), \(now), \(hub), \(json), \(expired), \(name), \(id))
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO registration_tag (tag, registration_id)
                SELECT unnest(\(installation.audienceTags + template.tags)::text[]), \(templateID) ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        return installation
    }

    private static func installation(hub: String, id: String, on connection: PostgresConnection, logger: Logger)
        async throws
        -> Installation?
    {
        try await connection.query(
            "SELECT document, expired, updated_at FROM registration WHERE hub = \(hub) AND installation_id = \(id)",
            logger: logger
        ).collect().first.map(installation)
    }

    private static func installation(_ row: PostgresRow) throws -> Installation {
        let (document, expired, updatedAt) = try row.decode((ByteBuffer, Int32, Int64).self)
        var installation = try Installation.stored(Array(buffer: document))
        installation.pushChannelExpired = expired != 0
        installation.lastUpdate = updatedAt
        return installation
    }
}

extension SQLStatement {
    /// The statement with its values bound for PostgreSQL (`$1…`).
    var postgresQuery: PostgresQuery {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values {
            switch value {
            case .text(let text): bindings.append(text)
            case .integer(let number): bindings.append(number)
            }
        }
        return PostgresQuery(unsafeSQL: text, binds: bindings)
    }
}
