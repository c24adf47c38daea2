import Foundation
public import HeraldModel
public import HeraldProto
public import HeraldSQL
import HeraldService

/// Hubs, their shared access keys, and the rights Herald users hold on them, beside the accounts
/// (``AuthSchema``), in whichever database `database-url` names.
///
/// Key secrets are stored as written: NH's signature is an HMAC keyed by the secret's own UTF-8
/// bytes, so the server needs the secret itself (as Azure does), not a hash of it. The database is
/// the service's own (a 0600 file owned by herald-auth's UID, or its own PostgreSQL schema).
///
/// Hub names are found regardless of case (an exact spelling first: two hubs made before names
/// were unique regardless of case stay reachable); every call that takes a hub name from outside
/// goes through ``resolve(_:)`` first.
public final class HubStore: Sendable {
    public static let listenKeyName = HubRules.listenKeyName
    public static let fullKeyName = HubRules.fullKeyName

    private let db: any SQLDatabase
    private let now: @Sendable () -> Int64

    public init(db: any SQLDatabase, now: @escaping @Sendable () -> Int64 = unixMillis) async throws {
        self.db = db
        self.now = now
        try await db.migrate(AuthSchema.schema)
        try await ensureDefaultHub()
    }

    /// The hub `default` with NH's two keys, made once even when replicas start together.
    private func ensureDefaultHub() async throws {
        _ = try await insertHub(Names.defaultHub, maxInstallations: 0)
    }

    /// Whether the hub was new (then it got its two keys in the same transaction).
    private func insertHub(_ name: String, maxInstallations: Int64) async throws -> Bool {
        let now = self.now()
        let id = HubRules.newID(for: name)
        return try await db.transaction { session in
            let inserted = try await session.executeReturning(
                """
                INSERT INTO hub (name, id, created_at, max_installations)
                SELECT \(name), \(id), \(now), \(maxInstallations)
                WHERE NOT EXISTS (SELECT 1 FROM hub WHERE lower(name) = lower(\(name)))
                ON CONFLICT (name) DO NOTHING RETURNING name
                """)
            guard !inserted.isEmpty else { return false }
            try await Self.insertKey(hub: name, name: HubRules.listenKeyName, rights: .listen, now: now, in: session)
            try await Self.insertKey(hub: name, name: HubRules.fullKeyName, rights: .full, now: now, in: session)
            return true
        }
    }

    // MARK: hubs

    nonisolated(nonsending) public func createHub(_ name: String, maxInstallations: Int64 = 0) async throws -> Hub {
        try HubRules.validateNewHub(name, maxInstallations: maxInstallations)
        guard try await insertHub(name, maxInstallations: maxInstallations) else { throw HubRules.alreadyExists(name) }
        return try await hub(name)
    }

    /// The stored name and immutable id of the hub `name` names, regardless of case, or nil.
    nonisolated(nonsending) public func resolve(_ name: String) async throws -> HubIdentity? {
        try await Self.resolve(name, in: db)
    }

    nonisolated(nonsending) private static func resolve(_ name: String, in session: any SQLSession) async throws
        -> HubIdentity?
    {
        try await session.queryFirst(
            "SELECT name, id FROM hub WHERE lower(name) = lower(\(name)) ORDER BY name = \(name) DESC LIMIT 1"
        ).map { HubIdentity(name: try $0[0], id: try $0[1]) }
    }

    /// The hub with its keys' names and rights, secrets left out.
    nonisolated(nonsending) public func hub(_ name: String) async throws -> Hub {
        guard let found = try await resolve(name),
            let row = try await db.queryFirst(
                "SELECT created_at, max_installations, requests_per_second, request_burst FROM hub WHERE name = \(found.name)"
            )
        else { throw HubRules.notFound(name) }
        return Hub(
            name: found.name, createdAtUnixMs: try row[0], keys: try await keys(of: found.name, secrets: false),
            maxInstallations: try row[1], id: found.id, requestsPerSecond: try row[2], requestBurst: try row[3])
    }

    nonisolated(nonsending) public func listHubs() async throws -> [Hub] {
        var hubs: [Hub] = []
        for name: String in try await db.query("SELECT name FROM hub ORDER BY name", { try $0[0] }) {
            hubs.append(try await hub(name))
        }
        return hubs
    }

    /// Sets every limit of `hub` herald-auth keeps (0: none).
    nonisolated(nonsending) public func setLimits(
        hub: String, maxInstallations: Int64, requestsPerSecond: Int64 = 0, requestBurst: Int64 = 0
    ) async throws -> Hub {
        guard maxInstallations >= 0, requestsPerSecond >= 0, requestBurst >= 0 else {
            throw ServiceError.invalidArgument(
                "max_installations, requests_per_second and request_burst must not be negative (0: no limit)")
        }
        guard requestsPerSecond <= RequestRate.maxPerSecond, requestBurst <= RequestRate.maxPerSecond else {
            throw ServiceError.invalidArgument(
                "requests_per_second and request_burst must be at most \(RequestRate.maxPerSecond)")
        }
        guard
            try await db.execute(
                """
                UPDATE hub SET max_installations = \(maxInstallations), requests_per_second = \(requestsPerSecond),
                               request_burst = \(requestBurst)
                WHERE name = \(hub)
                """) > 0
        else { throw ServiceError.notFound("hub \(hub) not found") }
        return try await self.hub(hub)
    }

    /// The request rate of the hub stored as `name` and, with `user`, that user's rights on it
    /// (``rights(hub:user:)``), in one read: what every Authenticate answers. None of either when
    /// there is no such hub.
    nonisolated(nonsending) public func requestRate(hub name: String, rightsOf user: String?) async throws -> (
        rate: RequestRate, rights: HubRights
    ) {
        let grant: SQLQuery =
            user.map { "(SELECT rights FROM hub_grant WHERE hub = \(name) AND user_name = \($0))" } ?? "NULL"
        return try await db.queryFirst(
            "SELECT requests_per_second, request_burst, COALESCE(\(grant), 0) FROM hub WHERE name = \(name)"
        ).map {
            (RequestRate(perSecond: try $0[0], burst: try $0[1]), HubRights(rawValue: try $0[2]))
        } ?? (RequestRate(), [])
    }

    nonisolated(nonsending) public func hubExists(_ name: String) async throws -> Bool {
        try await db.queryFirst("SELECT 1 FROM hub WHERE name = \(name)") != nil
    }

    nonisolated(nonsending) public func deleteHub(_ name: String) async throws {
        guard name != Names.defaultHub else { throw HubRules.defaultHubUndeletable }
        try await db.transaction { session in
            try await session.execute("DELETE FROM hub_key WHERE hub = \(name)")
            try await session.execute("DELETE FROM hub_grant WHERE hub = \(name)")
            guard try await session.execute("DELETE FROM hub WHERE name = \(name)") > 0 else {
                throw ServiceError.notFound("hub \(name) not found")
            }
        }
    }

    // MARK: keys

    nonisolated(nonsending) public func keys(of hub: String) async throws -> [HubKey] {
        guard try await hubExists(hub) else { throw ServiceError.notFound("hub \(hub) not found") }
        return try await keys(of: hub, secrets: true)
    }

    /// Creates the key with new secrets, or changes the rights of an existing one.
    nonisolated(nonsending) public func setKey(hub: String, name: String, rights: HubRights) async throws -> HubKey {
        try HubRules.validateKey(name: name, rights: rights)
        let now = self.now()
        try await db.transaction { session in
            // The hub row is held until the commit, so a concurrent delete cannot orphan the key.
            guard try await session.queryFirst("SELECT 1 FROM hub WHERE name = \(hub) \(.forShare)") != nil else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            let updated = try await session.execute(
                "UPDATE hub_key SET rights = \(rights.rawValue) WHERE hub = \(hub) AND name = \(name)")
            if updated == 0 { try await Self.insertKey(hub: hub, name: name, rights: rights, now: now, in: session) }
        }
        return try await key(hub: hub, name: name)
    }

    /// A new random secret in place of the primary or the secondary one.
    nonisolated(nonsending) public func rotateKey(hub: String, name: String, secondary: Bool) async throws -> HubKey {
        let column = secondary ? "secondary_key" : "primary_key"
        guard
            try await db.execute(
                "UPDATE hub_key SET \(raw: column) = \(HubRules.newSecret()) WHERE hub = \(hub) AND name = \(name)") > 0
        else { throw ServiceError.notFound("key \(name) of hub \(hub) not found") }
        return try await key(hub: hub, name: name)
    }

    nonisolated(nonsending) public func revokeKey(hub: String, name: String) async throws {
        guard try await db.execute("DELETE FROM hub_key WHERE hub = \(hub) AND name = \(name)") > 0 else {
            throw ServiceError.notFound("key \(name) of hub \(hub) not found")
        }
    }

    /// The key with its secrets and its hub's installation limit, in one read, or nil.
    nonisolated(nonsending) public func secrets(hub: String, name: String) async throws -> HubSecrets? {
        try await db.queryFirst(
            """
            SELECT k.rights, k.primary_key, k.secondary_key, h.max_installations, h.id, h.requests_per_second,
                   h.request_burst
            FROM hub_key k JOIN hub h ON h.name = k.hub
            WHERE k.hub = (SELECT name FROM hub WHERE lower(name) = lower(\(hub)) ORDER BY name = \(hub) DESC LIMIT 1)
            AND k.name = \(name)
            """
        ).map { row in
            HubSecrets(
                rights: HubRights(rawValue: try row[0]), primary: try row[1], secondary: try row[2],
                maxInstallations: try row[3], hubID: try row[4],
                rate: RequestRate(perSecond: try row[5], burst: try row[6]))
        }
    }

    // MARK: grants to Herald users

    /// Sets a user's rights on a hub; none removes the grant.
    nonisolated(nonsending) public func grant(hub: String, user: String, rights: HubRights) async throws {
        try await db.transaction { session in
            guard try await session.queryFirst("SELECT 1 FROM hub WHERE name = \(hub) \(.forShare)") != nil else {
                throw ServiceError.notFound("hub \(hub) not found")
            }
            if rights.isEmpty {
                try await session.execute("DELETE FROM hub_grant WHERE hub = \(hub) AND user_name = \(user)")
            } else {
                try await session.execute(
                    """
                    INSERT INTO hub_grant (hub, user_name, rights) VALUES (\(hub), \(user), \(rights.rawValue))
                    ON CONFLICT (hub, user_name) DO UPDATE SET rights = excluded.rights
                    """)
            }
        }
    }

    nonisolated(nonsending) public func rights(hub: String, user: String) async throws -> HubRights {
        HubRights(
            rawValue: try await db.queryFirst(
                "SELECT rights FROM hub_grant WHERE hub = \(hub) AND user_name = \(user)"
            ).map { try $0[0] } ?? 0)
    }

    /// Erase: every grant of `user` on every hub; returns how many.
    nonisolated(nonsending) public func revokeGrants(of user: String) async throws -> Int64 {
        Int64(try await db.execute("DELETE FROM hub_grant WHERE user_name = \(user)"))
    }

    /// Export: every grant of `user`, by hub name.
    nonisolated(nonsending) public func grants(of user: String) async throws -> [(hub: String, rights: HubRights)] {
        try await db.query("SELECT hub, rights FROM hub_grant WHERE user_name = \(user) ORDER BY hub") {
            (try $0[0], HubRights(rawValue: try $0[1]))
        }
    }

    /// Every hub, key and grant (ResetForTests); the default hub is made again.
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 {
        let deleted = try await db.deleteAll(["hub_grant", "hub_key", "hub"])
        try await ensureDefaultHub()
        return deleted
    }

    // MARK: helpers

    nonisolated(nonsending) private func key(hub: String, name: String) async throws -> HubKey {
        guard let key = try await keys(of: hub, secrets: true).first(where: { $0.name == name }) else {
            throw ServiceError.notFound("key \(name) of hub \(hub) not found")
        }
        return key
    }

    nonisolated(nonsending) private func keys(of hub: String, secrets: Bool) async throws -> [HubKey] {
        try await db.query(
            "SELECT name, rights, primary_key, secondary_key, created_at FROM hub_key WHERE hub = \(hub) ORDER BY name"
        ) { row in
            var key = HubKey(
                name: try row[0], primaryKey: secrets ? try row[2] : "", secondaryKey: secrets ? try row[3] : "",
                createdAtUnixMs: try row[4])
            key.hubRights = HubRights(rawValue: try row[1])
            return key
        }
    }

    nonisolated(nonsending) private static func insertKey(
        hub: String, name: String, rights: HubRights, now: Int64, in session: any SQLSession
    ) async throws {
        try await session.execute(
            """
            INSERT INTO hub_key (hub, name, rights, primary_key, secondary_key, created_at)
            VALUES (\(hub), \(name), \(rights.rawValue), \(HubRules.newSecret()), \(HubRules.newSecret()), \(now))
            """)
    }
}

/// What verifying a SAS token needs of its key.
public struct HubSecrets: Sendable {
    public var rights: HubRights
    public var primary: String
    public var secondary: String
    public var maxInstallations: Int64
    /// The hub's immutable id (``HubIdentity/id``).
    public var hubID: String
    public var rate: RequestRate
}

/// A hub as stored: its name as created and its immutable id.
public struct HubIdentity: Sendable, Equatable {
    public var name: String
    public var id: String
    public init(name: String, id: String) {
        self.name = name
        self.id = id
    }
}

/// The rules of hubs and keys, checked before the store writes.
public enum HubRules {
    public static let listenKeyName = "DefaultListenSharedAccessSignature"
    public static let fullKeyName = "DefaultFullSharedAccessSignature"

    /// Checks a new hub's name and limit.
    static func validateNewHub(_ name: String, maxInstallations: Int64) throws {
        guard maxInstallations >= 0 else {
            throw ServiceError.invalidArgument("max_installations must not be negative")
        }
        guard Names.isValidHubName(name) else {
            throw ServiceError.invalidArgument("hub name must be \(Names.hubNameRule)")
        }
        guard !Names.reservedHubNames.contains(name.lowercased()) else {
            throw ServiceError.invalidArgument("hub name \(name) is reserved for the edge's own routes")
        }
    }

    static func validateKey(name: String, rights: HubRights) throws {
        guard (1...256).contains(name.utf8.count), isKeyNameByte(name) else {
            throw ServiceError.invalidArgument("key name must be 1 to 256 characters of a-z A-Z 0-9 . - _")
        }
        // A name is a path segment (`/v1/hubs/{hub}/keys/{key}`, the console's forms): `.` and `..`
        // are resolved away by every URL parser, so such a key could not be named in a path.
        guard name != ".", name != ".." else {
            throw ServiceError.invalidArgument("key name must not be . or .. (a path segment)")
        }
        guard !rights.isEmpty else {
            throw ServiceError.invalidArgument("give at least one right: Listen, Send or Manage")
        }
    }

    /// A new hub's id: "default" for the hub default, else 64 random bits in hex after "h" (17
    /// characters, a valid hub name too, so registration's and dispatch's checks hold).
    static func newID(for name: String) -> String {
        if name == Names.defaultHub { return Names.defaultHub }
        var generator = SystemRandomNumberGenerator()
        let value = UInt64.random(in: .min ... .max, using: &generator)
        let hex = String(value, radix: 16)
        return "h" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    static func alreadyExists(_ name: String) -> ServiceError {
        ServiceError(.alreadyExists, "hub \(name) already exists (hub names are unique regardless of case)")
    }

    static func notFound(_ name: String) -> ServiceError { ServiceError.notFound("hub \(name) not found") }

    static let defaultHubUndeletable = ServiceError(
        .failedPrecondition, "the hub default serves the tutorial's routes and /v1; it cannot be deleted")

    /// 256 random bits in base64 (44 characters), the shape of Azure's keys.
    static func newSecret() -> String {
        Data(SecureRandom.bytes(32)).base64EncodedString()
    }

    private static func isKeyNameByte(_ name: String) -> Bool {
        name.utf8.allSatisfy {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".")
                || $0 == UInt8(ascii: "-")
                || $0 == UInt8(ascii: "_")
        }
    }
}
