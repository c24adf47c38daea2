/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns the last answer. The
/// deadline is what a test waits on, never a sleep of its own.
public func eventually(
    _ timeout: Duration = .seconds(20), _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
