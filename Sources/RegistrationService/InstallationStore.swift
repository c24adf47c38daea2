import Foundation
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldSQL
import HeraldService
import NotificationHubs

/// NH installations in the registration table (one row each, id "i-…", no owner), their NH JSON in
/// `document`, their tags plus the system tags `$InstallationId:{id}` and `$UserId:{id}` in
/// `registration_tag`. Every write commits before it answers, so a GET right after a PUT sees it
/// (NH processes installation writes in the background and may answer 404).
extension SQLRegistrationStore {
    /// Creates or replaces; keeps the row (and its id) of an existing installation. A changed push
    /// channel clears `pushChannelExpired`; the same channel keeps it. With `maxInstallations`
    /// above 0, creating one more in a hub that holds that many is RESOURCE_EXHAUSTED (counted over
    /// the (hub, installation_id) index, in the same transaction).
    @discardableResult
    nonisolated(nonsending) public func putInstallation(
        hub: String, _ installation: Installation, maxInstallations: Int64
    ) async throws -> Installation {
        let now = self.now()
        return try await db.groupWrite { session in
            try await Self.lock(InstallationRows.lockKey(hub: hub, id: installation.installationID), in: session)
            return try await Self.write(
                hub: hub, installation, maxInstallations: maxInstallations, now: now, in: session)
        }
    }

    /// Reads, patches and writes back in one transaction.
    nonisolated(nonsending) public func patchInstallation(
        hub: String, id: String, _ change: @escaping @Sendable (inout Installation) throws -> Void
    ) async throws -> Installation {
        let now = self.now()
        return try await db.groupWrite { session in
            try await Self.lock(InstallationRows.lockKey(hub: hub, id: id), in: session)
            guard var installation = try await Self.installation(hub: hub, id: id, in: session) else {
                throw ServiceError.notFound("Installation not found.")
            }
            try change(&installation)
            return try await Self.write(hub: hub, installation, now: now, in: session)
        }
    }

    nonisolated(nonsending) public func installation(hub: String, id: String) async throws -> Installation? {
        try await Self.installation(hub: hub, id: id, in: db)
    }

    /// Whether one was deleted.
    nonisolated(nonsending) public func deleteInstallation(hub: String, id: String) async throws -> Bool {
        try await db.groupWrite { session in
            try await session.execute("DELETE FROM registration WHERE hub = \(hub) AND installation_id = \(id)") > 0
        }
    }

    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform, evaluated in SQL.
    nonisolated(nonsending) public func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) async throws -> [Installation] {
        try await db.query(
            RegistrationSQL.installations(
                hub: hub, expression: expression, userID: userID, platform: platform, after: after, limit: limit),
            Self.installation)
    }

    // MARK: helpers

    /// Creates or replaces; with `maxInstallations` above 0, a new one is refused once the hub holds that many.
    private static func write(
        hub: String, _ installation: Installation, maxInstallations: Int64 = 0, now: Int64, in session: any SQLSession
    ) async throws -> Installation {
        var installation = installation
        let existing = try await session.queryFirst(
            "SELECT id, handle, expired FROM registration WHERE hub = \(hub) AND installation_id = \(installation.installationID)"
        )
        if existing == nil, maxInstallations > 0 {
            let count: Int64 =
                try await session.queryFirst(
                    "SELECT COUNT(*) FROM registration WHERE hub = \(hub) AND installation_id IS NOT NULL")?[0] ?? 0
            try RegistrationRules.checkRoom(count: count, limit: maxInstallations, of: "installations", hub: hub)
        }
        let id: String = try existing?[0] ?? RegistrationSQL.newID(prefix: "i-")
        installation.pushChannelExpired = RegistrationRules.channelExpired(
            stored: try existing.map { (try $0[1], try $0[2]) }, writing: installation.pushChannel)
        installation.lastUpdate = now
        let document = try installation.json()
        let platform = Int64(installation.platform.rawValue)
        let expired: Int64 = installation.pushChannelExpired ? 1 : 0
        if existing == nil {
            try await session.execute(
                """
                INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, installation_id, user_id, document, expired)
                VALUES (\(id), '', \(platform), \(installation.pushChannel), \(now), \(now), \(hub), \(installation.installationID),
                        \(installation.userID), \(document), \(expired))
                """)
        } else {
            try await session.execute(
                """
                UPDATE registration SET platform = \(platform), handle = \(installation.pushChannel), updated_at = \(now),
                    user_id = \(installation.userID), document = \(document), expired = \(expired)
                WHERE id = \(id)
                """)
        }
        try await Self.setTags(installation.audienceTags, of: id, new: existing == nil, in: session)
        try await Self.setTemplates(
            of: installation, parentID: id, hub: hub, new: existing == nil, now: now, in: session)
        return installation
    }

    /// An installation's template rows made to match `installation`, writing only what changed: a
    /// template it keeps keeps its row (and id), updated in place, with only the tags that changed
    /// written; one it dropped loses its row; a new one gets a row. Before, every write deleted and
    /// inserted them all: half the cost of a PATCH of an installation with one template.
    private static func setTemplates(
        of installation: Installation, parentID: String, hub: String, new: Bool, now: Int64,
        in session: any SQLSession
    ) async throws {
        var rows: [String: String] = [:]
        if !new {
            for row in try await session.query(
                "SELECT template_name, id FROM registration WHERE parent_id = \(parentID)")
            {
                rows[try row[0]] = try row[1]
            }
        }
        let dropped = rows.filter { installation.templates[$0.key] == nil }.map(\.value).sorted()
        if !dropped.isEmpty { try await session.execute("DELETE FROM registration WHERE id IN (\(list: dropped))") }
        let platform = Int64(installation.platform.rawValue)
        let expired: Int64 = installation.pushChannelExpired ? 1 : 0
        for (name, template) in installation.templates.sorted(by: { $0.key < $1.key }) {
            guard let id = rows[name] else {
                for statement in InstallationRows.template(
                    name, template, of: installation, parentID: parentID, hub: hub,
                    expired: installation.pushChannelExpired, now: now)
                {
                    try await session.execute(statement)
                }
                continue
            }
            try await session.execute(
                """
                UPDATE registration SET platform = \(platform), handle = \(installation.pushChannel), updated_at = \(now),
                    document = \(Array(template.wireJSON.utf8)), expired = \(expired)
                WHERE id = \(id)
                """)
            try await Self.setTags(installation.audienceTags + template.tags, of: id, new: false, in: session)
        }
    }

    private static func installation(hub: String, id: String, in session: any SQLSession) async throws
        -> Installation?
    {
        try await session.queryFirst(
            "SELECT document, expired, updated_at FROM registration WHERE hub = \(hub) AND installation_id = \(id)"
        ).map(installation)
    }

    /// A row of `SELECT document, expired, updated_at`.
    static func installation(_ row: SQLRow) throws -> Installation {
        var installation = try Installation.stored(try row[0])
        installation.pushChannelExpired = try row[1]
        installation.lastUpdate = try row[2]
        return installation
    }
}

/// The statements that write an installation's rows, shared by the store, the migration that
/// first wrote template rows, and herald-bench's seeding.
public enum InstallationRows {
    /// What a PostgreSQL writer of one installation locks (``SQLRegistrationStore/lock(_:in:)``).
    static func lockKey(hub: String, id: String) -> String { "installation\u{1}\(hub)\u{1}\(id)" }

    /// Replaces an installation's template rows: one per template (NH's template registrations),
    /// with the installation's channel, and its tags plus the template's tags and name.
    public static func templates(
        of installation: Installation, parentID: String, hub: String, expired: Bool, now: Int64
    ) -> [SQLQuery] {
        var statements: [SQLQuery] = ["DELETE FROM registration WHERE parent_id = \(parentID)"]
        for (name, template) in installation.templates.sorted(by: { $0.key < $1.key }) {
            statements += self.template(
                name, template, of: installation, parentID: parentID, hub: hub, expired: expired, now: now)
        }
        return statements
    }

    /// The statements that write one template's row (a new id) and its tags.
    static func template(
        _ name: String, _ template: Installation.Template, of installation: Installation, parentID: String,
        hub: String, expired: Bool, now: Int64
    ) -> [SQLQuery] {
        let id = RegistrationSQL.newID(prefix: "t-")
        var statements: [SQLQuery] = [
            """
            INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, document, expired, template_name, parent_id)
            VALUES (\(id), '', \(Int64(installation.platform.rawValue)), \(installation.pushChannel), \(now), \(now), \(hub),
                    \(Array(template.wireJSON.utf8)), \(Int64(expired ? 1 : 0)), \(name), \(parentID))
            """
        ]
        if let tags = RegistrationSQL.insertTags(installation.audienceTags + template.tags, of: id) {
            statements.append(tags)
        }
        return statements
    }
}
