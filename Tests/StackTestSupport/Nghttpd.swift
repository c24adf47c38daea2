package import Foundation
package import HeraldStack
package import HeraldTestSupport

/// nghttpd (Debian's nghttp2-server): an HTTP/2 server no one here wrote, answering 200 to every
/// POST (`--echo-upload`). With `--verify-client` it requests a client certificate and ends the
/// handshake of a client that presents none (it does not check whose it is), as APNs does for
/// certificate-based auth.
package final class Nghttpd: Sendable {
    package let url: String
    private let process: Process

    private init(url: String, process: Process) {
        self.url = url
        self.process = process
    }

    /// Starts nghttpd on a free loopback port with the certificate and key (PEM files).
    package static func start(certificate: String, key: String, verifyClient: Bool) async throws -> Nghttpd {
        guard let nghttpd = which("nghttpd") else {
            throw StackError(description: "nghttpd is missing: scripts/setup.sh --test installs nghttp2-server")
        }
        let port = try Stack.freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nghttpd)
        process.arguments =
            ["--echo-upload", "--no-content-length", "--address=127.0.0.1"] + (verifyClient ? ["--verify-client"] : [])
            + [String(port), key, certificate]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let server = Nghttpd(url: "https://127.0.0.1:\(port)", process: process)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, process.isRunning {
            if Stack.isListening(port) { return server }
            try await Task.sleep(for: .milliseconds(20))
        }
        server.stop()
        throw StackError(description: "nghttpd did not start on port \(port)")
    }

    /// SIGKILL, not SIGTERM: a test process whose ServiceGroup handles SIGTERM ignores it at the
    /// system level, and children inherit an ignored signal across exec, so nghttpd outlived
    /// every test run that started one.
    package func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
