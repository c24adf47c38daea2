import Foundation
import GRDB
public import HeraldModel
import ServiceLifecycle

/// Where a service keeps its data: the `database-url` setting.
///
/// - `sqlite:PATH` (the default, `sqlite:<data-dir>/<service>.sqlite`): the embedded store, one
///   process per file.
/// - `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=…&schema=…]`: a PostgreSQL server,
///   which several replicas of a service may share.
/// - `postgres://USER@/DATABASE?host=/run/postgresql[&port=5432]`: the same over the server's Unix
///   socket (`<host>/.s.PGSQL.<port>`), libpq's spelling. `postgresql://` is accepted too.
/// - `statement_cache=N` (PostgreSQL, 256 by default): how many statement texts each connection
///   prepares once and then only binds and runs; 0 prepares none (as a connection pooler in
///   transaction mode, such as PgBouncer without `max_prepared_statements`, needs).
///
/// On PostgreSQL each service keeps its tables in a schema of its own, `herald_<service>` unless
/// `schema=` says otherwise: services may share one database and never read each other's tables.
public enum DatabaseURL: Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(PostgresLocation)

    /// A PostgreSQL server and how to reach it; the password is never printed.
    public struct PostgresLocation: Sendable, Equatable {
        public enum Address: Sendable, Equatable {
            case tcp(host: String, port: Int)
            case unixSocket(path: String)
        }

        /// libpq's `sslmode`, reduced to what postgres-nio can do: `disable`, `prefer` (TLS when the
        /// server offers it), `require` (TLS or fail; the certificate is verified against the system's
        /// roots, or `sslrootcert`).
        public enum TLSMode: String, Sendable, Equatable, CaseIterable {
            case disable, prefer, require
        }

        public var address: Address
        public var user: String
        public var password: String?
        public var database: String
        public var schema: String
        public var tls: TLSMode
        /// `sslrootcert`: a PEM file of the CAs that may sign the server's certificate.
        public var rootCertificate: String?
        /// `statement_cache`: statement texts prepared per connection (``PostgresStatements``).
        public var statementCache = Self.defaultStatementCache
        public static let defaultStatementCache = 256
    }

    /// Parses `text`; `service` names the default schema.
    public init(_ text: String, service: String) throws {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else {
                throw ConfigError("database-url sqlite: needs a file path, e.g. sqlite:.herald/data/\(service).sqlite")
            }
            self = .sqlite(path: path)
            return
        }
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://"), let url = URLComponents(string: text)
        else {
            throw ConfigError(
                "database-url must be sqlite:PATH or postgres://user[:password]@host[:port]/database (got \(Self.redacted(text)))"
            )
        }
        let query = Dictionary(
            (url.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        let known: Set<String> = ["host", "port", "sslmode", "sslrootcert", "schema", "statement_cache"]
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            throw ConfigError(
                "database-url: unknown parameter \(unknown); known: \(known.sorted().joined(separator: ", "))")
        }
        guard let user = url.user, !user.isEmpty else {
            throw ConfigError("database-url needs a user: postgres://USER@…")
        }
        let database = String(url.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else {
            throw ConfigError("database-url needs a database name: postgres://user@host/DATABASE")
        }
        var port = url.port ?? 5432
        if let text = query["port"] {
            guard let value = Int(text) else { throw ConfigError("database-url: port must be a number") }
            port = value
        }
        guard (1...65535).contains(port) else { throw ConfigError("database-url: port must be 1...65535") }
        let address: PostgresLocation.Address
        if let dir = query["host"], dir.hasPrefix("/") {
            address = .unixSocket(path: "\(dir)/.s.PGSQL.\(port)")
        } else if let host = query["host"] ?? url.host, !host.isEmpty {
            address = .tcp(host: host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: port)
        } else {
            throw ConfigError(
                "database-url needs a host (postgres://user@HOST/db) or a socket folder (?host=/run/postgresql)")
        }
        let defaultTLS: PostgresLocation.TLSMode
        if case .unixSocket = address { defaultTLS = .disable } else { defaultTLS = .prefer }
        let tls: PostgresLocation.TLSMode
        switch query["sslmode"] {
        case nil: tls = defaultTLS
        case "verify-full", "verify-ca": tls = .require
        case "allow": tls = .prefer
        case let mode?:
            guard let parsed = PostgresLocation.TLSMode(rawValue: mode) else {
                throw ConfigError("database-url: sslmode must be disable, prefer, require or verify-full")
            }
            tls = parsed
        }
        let schema = query["schema"] ?? "herald_\(service)"
        guard Self.isIdentifier(schema) else {
            throw ConfigError(
                "database-url: schema must be lower-case letters, digits and _ (at most 63), starting with a letter or _"
            )
        }
        var statementCache = PostgresLocation.defaultStatementCache
        if let text = query["statement_cache"] {
            guard let value = Int(text), (0...10_000).contains(value) else {
                throw ConfigError("database-url: statement_cache must be a number of statements, 0...10000")
            }
            statementCache = value
        }
        self = .postgres(
            PostgresLocation(
                address: address, user: user, password: url.password, database: database, schema: schema, tls: tls,
                rootCertificate: query["sslrootcert"], statementCache: statementCache))
    }

    /// A PostgreSQL identifier Herald may splice into SQL unquoted: `[a-z_][a-z0-9_]*`, at most 63 bytes.
    public static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63,
            first == UInt8(ascii: "_") || (0x61...0x7a).contains(first)
        else {
            return false
        }
        return name.utf8.allSatisfy {
            $0 == UInt8(ascii: "_") || (0x61...0x7a).contains($0) || (0x30...0x39).contains($0)
        }
    }

    /// `text` with any password replaced by `***`, for error messages.
    static func redacted(_ text: String) -> String {
        guard var url = URLComponents(string: text), url.password != nil else { return text }
        url.password = "***"
        return url.string ?? "(unparsable)"
    }

    public var isPostgres: Bool {
        if case .postgres = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .sqlite(let path): return "sqlite:\(path)"
        case .postgres(let location):
            let at: String
            switch location.address {
            case .tcp(let host, let port): at = "\(host.contains(":") ? "[\(host)]" : host):\(port)"
            case .unixSocket(let path): at = "unix:\(path)"
            }
            return "postgres://\(location.user)@\(at)/\(location.database) schema \(location.schema)"
        }
    }
}

/// A service's database as `database-url` names it, opened: a SQLite pool on its file, or a
/// PostgreSQL pool in its schema. A store written over ``SQLDatabase`` takes ``sql``; dispatch's
/// outbox, whose transactions are not yet written that way, picks its class from the case.
public enum OpenedDatabase: Sendable {
    case sqlite(SQLiteDatabase)
    case postgres(HeraldPostgres)

    /// The database as one ``SQLDatabase``, whichever it is.
    public var sql: any SQLDatabase {
        switch self {
        case .sqlite(let database): database
        case .postgres(let database): database.sql
        }
    }

    /// The health check that the database takes a write.
    public var healthCheck: HealthCheck { sql.healthCheck }

}
