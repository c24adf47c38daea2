import ArgumentParser
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldStack
import Hummingbird
import Logging
import RegistrationService
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench hello`: a Hummingbird server with one route, the edge scenario's baseline (and
/// the memory scenario's). Same library, same machine, no RPCs.
struct HelloServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hello", abstract: "Serve GET /hello.", shouldDisplay: false)
    @Option var urlFile: String

    func run() async throws { try await execute() }

    func execute() async throws {
        let router = Router()
        router.get("hello") { _, _ in "Hello, world!" }
        let file = urlFile
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                try? "http://127.0.0.1:\(channel.localAddress?.port ?? 0)".write(
                    toFile: file, atomically: true, encoding: .utf8)
            },
            logger: Logger(label: "hello", factory: { _ in SwiftLogNoOpLogHandler() }))
        try await app.runService()
    }

    /// Starts `herald-bench hello` (under `launcher`, when given) and waits for its URL.
    static func start(
        dir: String, launcher: [String] = [], binDirectory: String = Stack.defaultBinDirectory(),
        timeout: Duration = .seconds(30)
    ) async throws -> (process: Process, url: String) {
        let file = dir + "/hello.url"
        let process = Process()
        let command = launcher + [binDirectory + "/herald-bench", "hello", "--url-file", file]
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        try process.run()
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, process.isRunning {
            if let url = try? String(contentsOfFile: file, encoding: .utf8), !url.isEmpty { return (process, url) }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        throw BenchError("the hello-world server did not start")
    }
}
