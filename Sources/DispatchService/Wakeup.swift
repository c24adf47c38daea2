import Synchronization

/// Wakes a sleeping worker early (a send was committed). A signal that finds no sleeper is kept
/// for the next wait, so none is lost; spurious wake-ups are harmless.
final class Wakeup: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    func wait(upTo timeout: Duration) async {
        let timer = Task { [weak self] in
            // Cancelled when the wait ended otherwise: then it must not signal (that would make
            // the next wait return at once, and the worker spin).
            do { try await Task.sleep(for: timeout) } catch { return }
            self?.signal()
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
        timer.cancel()
    }
}
