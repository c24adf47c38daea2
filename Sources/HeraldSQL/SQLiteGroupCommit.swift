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
            try onWriter { db in try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute() }
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
                    // Cached, as BEGIN and COMMIT are: a batch of n writes runs these 2n times.
                    try onWriter { db in try db.cachedStatement(sql: "SAVEPOINT herald_write").execute() }
                    let failed = await write.run(session)
                    ran += 1
                    try onWriter { db in
                        guard db.isInsideTransaction else { return }
                        if failed { try db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT herald_write").execute() }
                        try db.cachedStatement(sql: "RELEASE SAVEPOINT herald_write").execute()
                    }
                }
                guard try onWriter({ $0.isInsideTransaction }) else {
                    throw DatabaseError(resultCode: .SQLITE_ABORT, message: "batch rolled back")
                }
            }
            try onWriter { db in try db.cachedStatement(sql: "COMMIT").execute() }
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
///
/// Generic over the write's result, but its state is not: `groupWrite` runs unspecialised in the
/// store's module, where every use of a generic type (a `Result<Value, Error>`, a
/// `CheckedContinuation<Value, Error>`) costs a metadata look-up; these were a sixth of a
/// registration write's instructions.
final class GroupCommitSlot<Value: Sendable>: @unchecked Sendable {
    /// Written by ``run(_:_:)`` before ``state`` records that it ran; read after the answer, which
    /// ``state``'s lock orders after it.
    private var result: Value?
    private let state = Mutex(GroupCommitSlotState())

    /// Runs `body`; answers whether it threw.
    func run(_ body: @Sendable (any SQLSession) async throws -> Value, _ session: any SQLSession) async -> Bool {
        do {
            result = try await body(session)
            state.withLock { $0.ran = true }
            return false
        } catch {
            state.withLock {
                $0.ran = true
                $0.failure = error
            }
            return true
        }
    }

    /// The batch is over: committed (`batchError` nil) or not. A write that threw answers its own
    /// error either way; one that succeeded answers the batch's error if it did not commit.
    func finish(_ batchError: (any Error)?) {
        let resume: (UnsafeContinuation<Void, any Error>, (any Error)?)? = state.withLock { state in
            guard !state.answered else { return nil }
            let error: (any Error)? =
                state.failure ?? batchError
                ?? (state.ran ? nil : DatabaseError(resultCode: .SQLITE_ABORT, message: "write never ran"))
            state.answered = true
            state.error = error
            return state.caller.map { ($0, error) }
        }
        guard let (caller, error) = resume else { return }
        if let error { caller.resume(throwing: error) } else { caller.resume() }
    }

    /// Waits for the answer (the batch's writer has it at once), then answers the value.
    func value() async throws -> Value {
        let answered: (done: Bool, error: (any Error)?) = state.withLock { ($0.answered, $0.error) }
        if !answered.done {
            try await withUnsafeThrowingContinuation { (caller: UnsafeContinuation<Void, any Error>) in
                let now: (done: Bool, error: (any Error)?) = state.withLock { state in
                    if !state.answered { state.caller = caller }
                    return (state.answered, state.error)
                }
                guard now.done else { return }
                if let error = now.error { caller.resume(throwing: error) } else { caller.resume() }
            }
        } else if let error = answered.error {
            throw error
        }
        guard let result else { throw DatabaseError(resultCode: .SQLITE_ABORT, message: "write never ran") }
        return result
    }
}

/// A ``GroupCommitSlot``'s state, of no generic type.
struct GroupCommitSlotState {
    var ran = false
    var failure: (any Error)?
    var answered = false
    /// The answer: nil for success.
    var error: (any Error)?
    var caller: UnsafeContinuation<Void, any Error>?
}
