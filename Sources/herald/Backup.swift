import ArgumentParser
import AuthService
import DispatchService
import Foundation
import HeraldStack
import PayloadService
import RegistrationService

/// `herald backup`: a consistent copy of every service's SQLite database, taken while the stack serves.
struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy every service's SQLite database into a new folder, with a manifest, while the stack runs.",
        discussion: """
            Each database is copied in one read transaction (VACUUM INTO): every write acknowledged before the \
            backup started is in the copy. Services on PostgreSQL are backed up with pg_dump (see the README).
            """)

    @OptionGroup var data: DataOptions
    @Argument(help: "The backup's folder: new, or empty.")
    var destination: String

    func run() async throws {
        let source = data.dataDirectory
        do {
            let manifest = try StackBackup.backup(dataDirectory: source.path, to: destination)
            for database in manifest.databases {
                print(
                    "\(database.file)\t\(database.bytes) bytes\t\(database.migrations.count) migrations\tsha256 \(database.sha256)"
                )
            }
            print("backup of \(source.path) (from \(source.from)) written to \(destination)")
        } catch let error as BackupError {
            throw CLIError(message: error.description)
        }
    }
}

/// `herald restore`: a backup back into a stopped stack's data folder.
struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Restore a backup into the data folder of a stopped stack.",
        discussion: """
            Checks the backup against its manifest (sizes, SHA-256, migrations, integrity) and refuses one made by \
            a newer Herald, or a running stack. Databases already in the data folder are moved into replaced-<time>/ \
            there, never deleted.
            """)

    @OptionGroup var data: DataOptions
    @Argument(help: "A folder written by herald backup.")
    var source: String
    @Flag(help: "Only check the backup; change nothing.")
    var checkOnly = false

    func run() async throws {
        do {
            if checkOnly {
                let manifest = try StackBackup.verify(source, knownMigrations: knownMigrations)
                print("\(source): a whole backup started at \(manifest.startedAt); this Herald can restore it")
                return
            }
            let target = data.dataDirectory
            let replaced = try StackBackup.restore(
                source, dataDirectory: target.path, runtimeDirectory: data.stack.runtime.path,
                knownMigrations: knownMigrations)
            if let replaced { print("the databases that were in \(target.path) are now in \(replaced)") }
            print("restored \(source) into \(target.path) (from \(target.from)); start the stack")
        } catch let error as BackupError {
            throw CLIError(message: error.description)
        }
    }

    /// Per service, the migrations this build applies.
    var knownMigrations: [String: [String]] {
        [
            "auth": AuthSchema.schema.sqliteMigrationNames,
            "registration": RegistrationSchema.schema.sqliteMigrationNames,
            "payload": PayloadStore.schema.sqliteMigrationNames,
            "dispatch": DispatchDatabase.migrations,
        ]
    }
}

/// Where the stack's SQLite files are: `--data-dir`, else `--dir`'s `data/`, else `HERALD_DATA_DIR`,
/// else `.herald/data` (as `herald up` decides).
struct DataOptions: ParsableArguments {
    @OptionGroup var stack: StackOptions
    @Option(help: "The SQLite files' folder, when not <dir>/data; default: $HERALD_DATA_DIR.")
    var dataDir: String?

    var dataDirectory: (path: String, from: String) {
        folderSetting(flag: ("--data-dir", dataDir), dirGiven: stack.dir, variable: "HERALD_DATA_DIR")
            ?? (
                StackConfiguration(directory: stack.folder).dataDirectory,
                stack.dir.map { "--dir \($0)" } ?? "the default folder .herald"
            )
    }
}
