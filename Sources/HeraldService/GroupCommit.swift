public import GRDB
import Synchronization

/// Writes from concurrent callers committed together: one transaction, one WAL sync, for as many
/// writes as arrived while the previous batch was being written.
///
/// Why: SQLite has one writer, and with `synchronous = FULL` (the default, kept: an acknowledged
/// write survives a power cut) every transaction syncs the WAL. A write per transaction also holds
/// a thread of Swift's small cooperative pool while it waits for the writer, so at most one write
/// per core is even queued. Here the first caller writes (on its thread, as `db.write` would) and
/// the others wait without a thread; each write runs in a savepoint of the batch's transaction, so
/// one that throws is rolled back alone and its caller gets its error, and no caller hears of
/// success before the batch has committed. Writes in one batch came from callers none of whom had
/// been answered, so any order among them is one they could have had.
public final class GroupCommit: Sendable {
    /// What to tell a caller once its batch commits (nil) or fails (the error).
    typealias Finish = @Sendable ((any Error)?) -> Void

    struct Item: Sendable {
        /// Runs the write, in a savepoint when others share the transaction; never throws (its
        /// own error is kept for ``Finish``). `failed`: the write threw.
        let run: @Sendable (Database, _ savepoint: Bool) -> (failed: Bool, finish: Finish)
        /// The batch could not even start, or stopped before this write.
        let abandon: @Sendable (any Error) -> Void
    }

    private let db: any DatabaseWriter
    private let maxBatch: Int
    private let state = Mutex<(pending: [Item], writing: Bool)>(([], false))

    /// `maxBatch` bounds one transaction, so one batch never holds the writer for long.
    public init(_ db: any DatabaseWriter, maxBatch: Int = 256) {
        self.db = db
        self.maxBatch = maxBatch
    }

    /// Writes waiting for the next batch (tests).
    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Runs `body` in the next batch; returns its value once that batch has committed.
    public func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let item = Item(
                run: { db, savepoint in
                    let result: Result<T, any Error>
                    do {
                        if savepoint {
                            var value: T?
                            try db.inSavepoint {
                                value = try body(db)
                                return .commit
                            }
                            result = .success(value!)
                        } else {
                            result = .success(try body(db))
                        }
                    } catch {
                        result = .failure(error)
                    }
                    let failed = if case .failure = result { true } else { false }
                    return (
                        failed,
                        { commitError in
                            if let commitError, case .success = result {
                                continuation.resume(throwing: commitError)
                            } else {
                                continuation.resume(with: result)
                            }
                        }
                    )
                },
                abandon: { continuation.resume(throwing: $0) })
            let leads = state.withLock { state in
                state.pending.append(item)
                if state.writing { return false }
                state.writing = true
                return true
            }
            if leads { writeBatches() }
        }
    }

    /// Writes one batch, then hands the next (if any) to a new task, so that no caller's answer
    /// waits for batches that arrived after its own.
    private func writeBatches() {
        let batch = state.withLock { state in
            let batch = Array(state.pending.prefix(maxBatch))
            state.pending.removeFirst(batch.count)
            return batch
        }
        var finishes: [Finish] = []
        do {
            try db.writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    // A write alone needs no savepoint: if it throws, its transaction is rolled back.
                    if batch.count == 1 {
                        let (failed, finish) = batch[0].run(db, false)
                        finishes.append(finish)
                        return failed ? .rollback : .commit
                    }
                    for item in batch {
                        // An error that ends the whole transaction (a full disk, say) ends the batch:
                        // writes after it would otherwise run, and commit, outside it.
                        guard db.isInsideTransaction else { break }
                        finishes.append(item.run(db, true).finish)
                    }
                    guard db.isInsideTransaction else {
                        throw DatabaseError(resultCode: .SQLITE_ABORT, message: "batch rolled back")
                    }
                    return .commit
                }
            }
            for finish in finishes { finish(nil) }  // every write ran: the transaction is still open at its end
        } catch {
            for finish in finishes { finish(error) }
            for item in batch.dropFirst(finishes.count) { item.abandon(error) }
        }
        let more = state.withLock { state in
            if state.pending.isEmpty { state.writing = false }
            return state.writing
        }
        if more { Task { self.writeBatches() } }
    }
}
