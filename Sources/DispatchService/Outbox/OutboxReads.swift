import GRDB
import HeraldModel

/// Tests' reads of a SQLite outbox's file.
extension Outbox {
    /// A read on the outbox's SQLite file (tests).
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        guard let sqlite else { throw ServiceError(.failedPrecondition, "not a SQLite outbox") }
        return try sqlite.writer.read(body)
    }
}
