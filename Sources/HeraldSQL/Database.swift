import Foundation
public import GRDB
public import HeraldModel

/// How every Herald service opens its own SQLite database.
public enum HeraldDatabase {
    /// Writers wait up to five seconds for the lock instead of failing at once. Open the file with a
    /// `DatabasePool`, which turns on WAL itself so readers never wait for the writer; each store
    /// applies its own migrations. GRDB may leave a transaction open between two calls: that is
    /// how ``SQLiteDatabase`` runs a transaction whose body is async (its gate keeps other writes out).
    public static var configuration: Configuration {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        configuration.allowsUnsafeTransactions = true
        return configuration
    }

    /// ``configuration`` plus `PRAGMA secure_delete`: deleted rows are overwritten with zeros, for
    /// databases that hold content which must not outlive its deletion (secure and rich payloads).
    public static var secureDeleteConfiguration: Configuration {
        var configuration = Self.configuration
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA secure_delete = ON") }
        return configuration
    }

    /// Applies `migrator` to `db`, after refusing a database that a newer Herald migrated (it has
    /// migrations this binary does not know): serving a schema this code does not understand could
    /// lose data, so the service stops with the names instead.
    ///
    /// `sharing` names the other migrators of the same file (dispatch keeps its outbox and the
    /// inbox in one), whose migrations are known too.
    public static func migrate(_ migrator: DatabaseMigrator, _ db: any DatabaseWriter, sharing: [DatabaseMigrator] = [])
        throws
    {
        let known = Set(([migrator] + sharing).flatMap(\.migrations))
        let unknown = try db.read { db in try migrator.appliedIdentifiers(db).subtracting(known) }
        guard unknown.isEmpty else {
            throw ConfigError(
                "database \(db.path) has migrations this binary does not know (\(unknown.sorted().joined(separator: ", "))): "
                    + "a newer Herald migrated it; run that version or newer")
        }
        try migrator.migrate(db)
    }
}

/// A full disk refuses writes with SQLITE_FULL: the caller gets ``ServiceError/storageFull`` (the
/// edge answers 507), not an internal error.
extension DatabaseError: ServiceErrorConvertible {
    public var serviceError: ServiceError? { resultCode == .SQLITE_FULL ? .storageFull : nil }
}
