import Crypto
import Foundation
import GRDB

#if canImport(Glibc)
    import Glibc
#endif

/// Backs up and restores the SQLite databases of a stack's data folder (`herald backup`,
/// `herald restore`).
///
/// A backup is taken while the stack serves: each database is copied with `VACUUM INTO`, which
/// reads it in one transaction, so the copy is that database as of one instant, with every write
/// committed before it, and never half a transaction (WAL mode lets the services go on writing
/// meanwhile). The four databases are copied one after another, not at one instant across
/// services: a write acknowledged before the backup started is in every copy; one made while it
/// runs may be in one service's copy and not another's (a send without its outbox row, say), as
/// after a crash of some services, which each service already tolerates.
///
/// `manifest.json`, written last, describes the copies: format, SQLite version, and per database
/// its size, SHA-256, applied migrations and `PRAGMA integrity_check`. A folder without it is not
/// a backup. Restore checks every line of it, and that this Herald knows every migration, before
/// it touches the data folder.
public enum StackBackup {
    /// The services that keep a SQLite database, named `<service>.sqlite` in the data folder.
    public static let services = ["auth", "registration", "payload", "dispatch"]
    public static let manifestName = "manifest.json"
    public static let format = "herald-backup/1"

    public struct Manifest: Codable, Sendable, Equatable {
        public var format: String
        /// ISO 8601, UTC: when the backup started.
        public var startedAt: String
        public var sqliteVersion: String
        public var databases: [Database]

        public struct Database: Codable, Sendable, Equatable {
            public var service: String
            public var file: String
            public var bytes: Int
            public var sha256: String
            /// Applied migrations, in the order they ran.
            public var migrations: [String]
            public var integrity: String
        }
    }

    /// Copies every service's database in `dataDirectory` into the new folder `destination` and
    /// writes its manifest. `destination` must not exist or be empty.
    @discardableResult
    public static func backup(dataDirectory: String, to destination: String) throws -> Manifest {
        let files = FileManager.default
        if files.fileExists(atPath: destination) {
            guard (try files.contentsOfDirectory(atPath: destination)).isEmpty else {
                throw BackupError("\(destination) is not empty: a backup goes into a new folder")
            }
        } else {
            try files.createDirectory(atPath: destination, withIntermediateDirectories: true)
        }
        let missing = services.filter { !files.fileExists(atPath: "\(dataDirectory)/\($0).sqlite") }
        guard missing.isEmpty else {
            throw BackupError(
                "no \(missing.map { "\($0).sqlite" }.joined(separator: ", ")) in \(dataDirectory): is it a Herald data folder? "
                    + "(services on PostgreSQL are backed up with pg_dump: see the README)")
        }
        let startedAt = ISO8601DateFormatter().string(from: Date())
        var databases: [Manifest.Database] = []
        var sqliteVersion = ""
        for service in services {
            let file = "\(service).sqlite"
            let source = try DatabaseQueue(path: "\(dataDirectory)/\(file)", configuration: sourceConfiguration)
            try source.inDatabase { db in
                // One read transaction: the copy is the database as of one instant.
                try db.execute(sql: "VACUUM INTO ?", arguments: ["\(destination)/\(file)"])
                sqliteVersion = try String.fetchOne(db, sql: "SELECT sqlite_version()") ?? ""
            }
            try source.close()
            let (migrations, integrity) = try inspect("\(destination)/\(file)")
            guard integrity == "ok" else {
                throw BackupError("the copy of \(file) fails PRAGMA integrity_check: \(integrity)")
            }
            let (bytes, sha256) = try digest("\(destination)/\(file)")
            try sync("\(destination)/\(file)")
            databases.append(
                Manifest.Database(
                    service: service, file: file, bytes: bytes, sha256: sha256, migrations: migrations,
                    integrity: integrity))
        }
        let manifest = Manifest(
            format: format, startedAt: startedAt, sqliteVersion: sqliteVersion, databases: databases)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // Written last, through a rename: a folder with a manifest holds a whole backup.
        try encoder.encode(manifest).write(to: URL(fileURLWithPath: "\(destination)/\(manifestName)"), options: .atomic)
        try sync(destination)
        return manifest
    }

    /// Checks the backup in `source` against its manifest and against `knownMigrations` (per
    /// service, the migrations this Herald has), without changing anything. Returns the manifest.
    public static func verify(_ source: String, knownMigrations: [String: [String]]) throws -> Manifest {
        let manifestPath = "\(source)/\(manifestName)"
        guard let data = FileManager.default.contents(atPath: manifestPath) else {
            throw BackupError("no \(manifestName) in \(source): not a Herald backup, or one that did not finish")
        }
        let manifest: Manifest
        do { manifest = try JSONDecoder().decode(Manifest.self, from: data) } catch {
            throw BackupError("\(manifestPath) is not a Herald backup manifest: \(error)")
        }
        guard manifest.format == format else {
            throw BackupError("\(manifestPath) has format \(manifest.format); this Herald reads \(format)")
        }
        guard manifest.databases.map(\.service).sorted() == services.sorted(),
            manifest.databases.allSatisfy({ $0.file == "\($0.service).sqlite" })
        else {
            throw BackupError(
                "\(manifestPath) lists \(manifest.databases.map(\.file)); a backup holds \(services.map { "\($0).sqlite" })"
            )
        }
        for database in manifest.databases {
            let path = "\(source)/\(database.file)"
            guard FileManager.default.fileExists(atPath: path) else { throw BackupError("\(path) is missing") }
            let (bytes, sha256) = try digest(path)
            guard bytes == database.bytes, sha256 == database.sha256 else {
                throw BackupError(
                    "\(path) is not the file the manifest describes (\(bytes) bytes, SHA-256 \(sha256); the manifest says "
                        + "\(database.bytes) bytes, \(database.sha256))")
            }
            let (migrations, integrity) = try inspect(path)
            guard migrations == database.migrations else {
                throw BackupError("\(path) has migrations \(migrations); the manifest says \(database.migrations)")
            }
            guard integrity == "ok" else { throw BackupError("\(path) fails PRAGMA integrity_check: \(integrity)") }
            let unknown = Set(migrations).subtracting(knownMigrations[database.service] ?? [])
            guard unknown.isEmpty else {
                throw BackupError(
                    "\(database.file) has migrations this Herald does not know (\(unknown.sorted().joined(separator: ", "))): "
                        + "a newer Herald made it; restore it with that version or newer")
            }
        }
        return manifest
    }

    /// Restores the backup in `source` into `dataDirectory` after ``verify(_:knownMigrations:)``.
    /// The stack must be stopped: a service whose socket in `runtimeDirectory` answers stops the
    /// restore. Databases already in the data folder are not deleted but moved into
    /// `replaced-<time>/` there; returns that folder when there were any.
    @discardableResult
    public static func restore(
        _ source: String, dataDirectory: String, runtimeDirectory: String, knownMigrations: [String: [String]]
    ) throws -> String? {
        let manifest = try verify(source, knownMigrations: knownMigrations)
        for service in services where socketAnswers("\(runtimeDirectory)/\(service).sock") {
            throw BackupError(
                "herald-\(service) is running (its socket \(runtimeDirectory)/\(service).sock answers): stop the stack before a restore"
            )
        }
        let files = FileManager.default
        // Regular files only: a link in the backup would be copied as a link, and the restored
        // service would write into the backup folder (or wherever the link points).
        for database in manifest.databases { try requireRegularFile("\(source)/\(database.file)") }
        try files.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        var replaced: String?
        let stamp = ISO8601DateFormatter().string(from: Date()).replacingOccurrences(of: ":", with: "")
        for database in manifest.databases {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let existing = "\(dataDirectory)/\(database.file)\(suffix)"
                guard files.fileExists(atPath: existing) else { continue }
                let aside = replaced ?? "\(dataDirectory)/replaced-\(stamp)"
                if replaced == nil { try files.createDirectory(atPath: aside, withIntermediateDirectories: true) }
                replaced = aside
                try files.moveItem(atPath: existing, toPath: "\(aside)/\(database.file)\(suffix)")
            }
        }
        for database in manifest.databases {
            let partial = "\(dataDirectory)/\(database.file).restoring"
            try? files.removeItem(atPath: partial)
            try files.copyItem(atPath: "\(source)/\(database.file)", toPath: partial)
            try requireRegularFile(partial)
            // What was written, not only what was read: the copy is the file the manifest describes.
            let written = try digest(partial)
            guard written.bytes == database.bytes, written.sha256 == database.sha256 else {
                try? files.removeItem(atPath: partial)
                throw BackupError("the copy of \(database.file) is not the file the manifest describes")
            }
            try sync(partial)
            try files.moveItem(atPath: partial, toPath: "\(dataDirectory)/\(database.file)")
        }
        try sync(dataDirectory)
        return replaced
    }

    // MARK: helpers

    /// Throws unless `path` is a regular file itself (not a link, device or folder in its place).
    static func requireRegularFile(_ path: String) throws {
        let type = try? FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType
        guard type == .typeRegular else {
            throw BackupError("\(path) is not a regular file (\(type.map { "\($0.rawValue)" } ?? "missing")): refused")
        }
    }

    /// The services' files are opened as they open them (busy timeout), never created.
    private static var sourceConfiguration: Configuration {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        return configuration
    }

    /// The applied migrations and `PRAGMA integrity_check` of the database at `path`.
    private static func inspect(_ path: String) throws -> (migrations: [String], integrity: String) {
        var configuration = Configuration()
        configuration.readonly = true
        let db = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? db.close() }
        return try db.read { db in
            let migrations =
                try db.tableExists("grdb_migrations")
                ? try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid") : []
            let integrity = try String.fetchAll(db, sql: "PRAGMA integrity_check").joined(separator: "; ")
            return (migrations, integrity)
        }
    }

    /// The size and SHA-256 (hex) of the file at `path`, read 1 MiB at a time.
    public static func digest(_ path: String) throws -> (bytes: Int, sha256: String) {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw BackupError("cannot read \(path)") }
        defer { try? handle.close() }
        var hash = SHA256()
        var bytes = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hash.update(data: chunk)
            bytes += chunk.count
        }
        return (bytes, hash.finalize().map { String(format: "%02x", $0) }.joined())
    }

    /// fsync of a file or folder: a backup or restore that returned is on disk.
    private static func sync(_ path: String) throws {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw BackupError("cannot open \(path) to sync it") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw BackupError("fsync of \(path) failed (errno \(errno))") }
    }

    /// True when something accepts a connection on the Unix socket at `path`.
    static func socketAnswers(_ path: String) -> Bool {
        guard FileManager.default.fileExists(atPath: path) else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }
}

public struct BackupError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
