import GRDB
import Synchronization

/// SQLite's group commit: writes from concurrent callers committed together, one transaction and
/// one WAL sync for as many writes as arrived while the previous batch was being written.
///
/// Why: SQLite has one writer, and with `synchronous = FULL` (the default, kept: an acknowledged
/// write survives a power cut) every transaction syncs the WAL. The caller that finds no batch
/// being written writes one (on its own task, as ``SQLiteDatabase/transaction(_:)`` would); the
/// others wait without a thread. Each write of a shared batch runs in a savepoint of its own, so
/// one that throws is rolled back alone and its caller gets its error, and no caller hears of
/// success before the batch has committed. Writes in one batch came from callers none of whom had
/// been answered, so any order among them is one they could have had. After its batch the writer
/// hands the next one (if any) to a new task, so that no caller's answer waits for batches that
/// arrived after its own.
extension SQLiteDatabase {
    nonisolated(nonsending) public func groupWrite<Result: Sendable>(
        _ body: @escaping @Sendable (any SQLSession) async throws -> Result
    ) async throws -> Result {
        try checkOutsideTransaction()
        let slot = GroupCommitSlot<Result>()
        let write = GroupCommitQueue.Write(
            run: { session in await slot.run(body, session) },
            finish: { slot.finish($0) })
        if commits.enqueue(write) { await writeBatch() }
        return try await slot.value()
    }

    /// Writes waiting for the next batch (tests).
    var pendingGroupWrites: Int { commits.pendingCount }

    /// Writes one batch, then hands the next (if any) to a new task.
    nonisolated(nonsending) private func writeBatch() async {
        let batch = commits.take()
        await gate.acquire()
        var ran = 0
        var failure: (any Error)?
        do {
            try onWriter { db in try db.execute(sql: "BEGIN IMMEDIATE") }
            try await Self.$transactionOwner.withValue(ObjectIdentifier(self)) {
                let session = Session(database: self)
                // A write alone needs no savepoint: if it throws, its transaction is rolled back.
                if batch.count == 1 {
                    ran = 1
                    if await batch[0].run(session) { throw GroupCommitQueue.WriteFailed() }
                    return
                }
                for write in batch {
                    // An error that ends the whole transaction (a full disk, say) ends the batch:
                    // writes after it would otherwise run, and commit, outside it.
                    guard try onWriter({ $0.isInsideTransaction }) else { break }
                    try onWriter { db in try db.execute(sql: "SAVEPOINT herald_write") }
                    let failed = await write.run(session)
                    ran += 1
                    try onWriter { db in
                        guard db.isInsideTransaction else { return }
                        if failed { try db.execute(sql: "ROLLBACK TO SAVEPOINT herald_write") }
                        try db.execute(sql: "RELEASE SAVEPOINT herald_write")
                    }
                }
                guard try onWriter({ $0.isInsideTransaction }) else {
                    throw DatabaseError(resultCode: .SQLITE_ABORT, message: "batch rolled back")
                }
            }
            try onWriter { db in try db.execute(sql: "COMMIT") }
        } catch {
            // The lone write's own error is its answer; anything else fails the whole batch.
            if !(error is GroupCommitQueue.WriteFailed) { failure = error }
            try? onWriter { db in if db.isInsideTransaction { try db.execute(sql: "ROLLBACK") } }
        }
        gate.release()
        for write in batch.prefix(ran) { write.finish(failure) }
        for write in batch.dropFirst(ran) {
            write.finish(failure ?? DatabaseError(resultCode: .SQLITE_ABORT, message: "batch rolled back"))
        }
        if commits.finishBatch() { Task { await self.writeBatch() } }
    }
}

/// The writes waiting for a group commit, and whether a batch is being written.
final class GroupCommitQueue: Sendable {
    struct Write: Sendable {
        /// Runs the write; never throws (its own error is kept for ``finish``). Answers whether it threw.
        let run: @Sendable (any SQLSession) async -> Bool
        /// After the batch: nil when it committed, else why not. Writes that never ran get an error.
        let finish: @Sendable ((any Error)?) -> Void
    }

    /// The lone write of a batch threw: its transaction is rolled back, its error is its answer.
    struct WriteFailed: Error {}

    /// One transaction's bound, so one batch never holds the writer for long.
    let maxBatch = 256
    private let state = Mutex<(pending: [Write], writing: Bool)>(([], false))

    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Queues `write`; answers whether the caller is to write the batch (none was being written).
    func enqueue(_ write: Write) -> Bool {
        state.withLock { state in
            state.pending.append(write)
            if state.writing { return false }
            state.writing = true
            return true
        }
    }

    /// The next batch, oldest first.
    func take() -> [Write] {
        state.withLock { state in
            let batch = Array(state.pending.prefix(maxBatch))
            state.pending.removeFirst(batch.count)
            return batch
        }
    }

    /// After a batch: whether another is to be written (else no batch is being written).
    func finishBatch() -> Bool {
        state.withLock { state in
            if state.pending.isEmpty { state.writing = false }
            return state.writing
        }
    }
}

/// One caller's write in a group commit: its result once it ran, and its answer once its batch
/// committed or failed.
final class GroupCommitSlot<Result: Sendable>: Sendable {
    private enum State {
        case waiting(ran: Swift.Result<Result, any Error>?, caller: CheckedContinuation<Result, any Error>?)
        case answered(Swift.Result<Result, any Error>)
    }

    private let state = Mutex<State>(.waiting(ran: nil, caller: nil))

    /// Runs `body`; answers whether it threw.
    func run(_ body: @Sendable (any SQLSession) async throws -> Result, _ session: any SQLSession) async -> Bool {
        let result: Swift.Result<Result, any Error>
        do {
            result = .success(try await body(session))
        } catch {
            result = .failure(error)
        }
        state.withLock { state in
            if case .waiting(_, let caller) = state { state = .waiting(ran: result, caller: caller) }
        }
        if case .failure = result { return true }
        return false
    }

    /// The batch is over: committed (`batchError` nil) or not. A write that threw answers its own
    /// error either way; one that succeeded answers the batch's error if it did not commit.
    func finish(_ batchError: (any Error)?) {
        let answer: (CheckedContinuation<Result, any Error>?, Swift.Result<Result, any Error>)? = state.withLock {
            state in
            guard case .waiting(let ran, let caller) = state else { return nil }
            let result: Swift.Result<Result, any Error> =
                switch (ran, batchError) {
                case (.failure(let error)?, _): .failure(error)
                case (_, let error?): .failure(error)
                case (.success(let value)?, nil): .success(value)
                case (nil, nil): .failure(DatabaseError(resultCode: .SQLITE_ABORT, message: "write never ran"))
                }
            state = .answered(result)
            return (caller, result)
        }
        if let (caller, result) = answer { caller?.resume(with: result) }
    }

    /// Waits for the answer (the batch's writer has it at once).
    func value() async throws -> Result {
        let answered: Swift.Result<Result, any Error>? = state.withLock { state in
            if case .answered(let result) = state { return result }
            return nil
        }
        if let answered { return try answered.get() }
        return try await withCheckedThrowingContinuation { (caller: CheckedContinuation<Result, any Error>) in
            let answered: Swift.Result<Result, any Error>? = state.withLock { state in
                switch state {
                case .answered(let result): return result
                case .waiting(let ran, _):
                    state = .waiting(ran: ran, caller: caller)
                    return nil
                }
            }
            if let answered { caller.resume(with: answered) }
        }
    }
}
