import HeraldModel
import Synchronization

/// Per-stream flow control: how many more MESSAGE frames the peer can take.
///
/// A server stream's `send` waits here once the client's window is used up, so a slow reader slows
/// the producer down instead of filling memory (docs/rpc-protocol.md, WINDOW).
final class CreditGate: Sendable {
    private struct State {
        var credits: UInt64
        var waiter: CheckedContinuation<Void, any Error>?
        var cancelled = false
    }

    private let state: Mutex<State>

    /// `window` > 0 (a call with window 0 gets no gate: it is not flow-controlled).
    init(window: UInt32) {
        // trap-ok: Herald code makes gates with its own window settings, checked when they are read.
        precondition(window > 0, "a window of 0 means no flow control; make no gate for it")
        state = Mutex(State(credits: UInt64(window)))
    }

    func acquire() async throws {
        let ready: Bool = try state.withLock { state in
            if state.cancelled { throw CancellationError() }
            if state.credits > 0 {
                state.credits -= 1
                return true
            }
            return false
        }
        if ready { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLock { state in
                    if state.cancelled || Task.isCancelled { return .failure(CancellationError()) }
                    if state.credits > 0 {
                        state.credits -= 1
                        return .success(())
                    }
                    state.waiter = continuation
                    return nil
                }
                if let resume { continuation.resume(with: resume) }
            }
        } onCancel: {
            cancel()
        }
    }

    func grant(_ credits: UInt32) {
        let waiter: CheckedContinuation<Void, any Error>? = state.withLock { state in
            state.credits += UInt64(credits)
            guard state.credits > 0, let waiter = state.waiter else { return nil }
            state.credits -= 1
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    func cancel() {
        let waiter = state.withLock { state in
            state.cancelled = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(throwing: CancellationError())
    }
}
