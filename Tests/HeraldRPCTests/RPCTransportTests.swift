import Foundation
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What test handlers report back: tokens of handlers that started, and of those that were cancelled.
let handlerEvents = Mutex<(started: Set<String>, cancelled: Set<String>)>(([], []))
/// Messages each tracked stream has handed to its transport so far, by token.
let streamProgress = Mutex<[String: Int]>([:])

/// One method table served over both transports at once, driven through RPCClient: every case runs
/// over the lean protocol and over gRPC, and must behave the same.
@Suite("transport conformance (lean and gRPC)", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct TransportConformanceTests {
    struct Boom: Error {}

    /// Test handlers on real method descriptors; the request picks the behaviour.
    static func table() -> MethodTable {
        var table = MethodTable()
        table.register(AuthServiceMethods.authenticate) { request, context in
            let command = request.authorization
            if command.hasPrefix("status:"), let code = StatusCode(rawValue: Int(command.dropFirst(7)) ?? -1) {
                throw ServiceError(code, "status \(code.rawValue) as asked")
            }
            if command == "boom" { throw Boom() }
            if command == "where" {  // where the handler runs, and where offEventLoop runs its body
                let started = MultiThreadedEventLoopGroup.currentEventLoop != nil
                let off = try await context.offEventLoop { MultiThreadedEventLoopGroup.currentEventLoop != nil }
                // Where it goes on afterwards is the runtime's choice (back on the loop when the
                // detached task was done before the await suspended), so it is not checked.
                return AuthenticateResponse(user: "started:\(started) off:\(off)")
            }
            if command == "locked" {
                throw ServiceError.resourceExhausted("locked; retry after 42 s", retryAfterSeconds: 42)
            }
            if command == "full" { throw ServiceError.storageFull }
            if command.hasPrefix("nap:") {  // "nap:<token>": a call that takes 500 ms, then succeeds
                handlerEvents.withLock { _ = $0.started.insert(String(command.dropFirst(4))) }
                try await Task.sleep(for: .milliseconds(500))
            }
            if command.hasPrefix("slow:") {
                let token = String(command.dropFirst(5))
                handlerEvents.withLock { _ = $0.started.insert(token) }
                do {
                    try await Task.sleep(for: .seconds(60))
                } catch {
                    handlerEvents.withLock { _ = $0.cancelled.insert(token) }
                    throw error
                }
            }
            return AuthenticateResponse(user: command, scheme: context.requestID)
        }
        // Every case of this suite runs Authenticate started on the event loop (lean), as herald-auth does.
        table.startOnEventLoop(AuthServiceMethods.authenticate)
        // Large messages both ways: StorePayload answers the size it got, FetchPayload sends `id` bytes.
        table.register(PayloadServiceMethods.storePayload) { request, _ in
            StorePayloadResponse(id: Int64(request.content.count), expiresAtUnixMs: Int64(request.content.last ?? 0))
        }
        table.register(PayloadServiceMethods.fetchPayload) { request, _ in
            FetchPayloadResponse(id: request.id, content: (0..<Int(request.id)).map { UInt8(truncatingIfNeeded: $0) })
        }
        // A stream of `tag` records, `platform` per message (500 when 0); "track:<token>" streams
        // 10,000 single records and counts how many it has sent.
        table.register(RegistrationServiceMethods.streamAudience) { request, _, stream in
            if request.tag.hasPrefix("track:") {
                let token = String(request.tag.dropFirst(6))
                for i in 0..<10_000 {
                    try await stream.send(AudienceBatch(registrations: [Registration(registrationID: "r-\(i)")]))
                    streamProgress.withLock { $0[token] = i + 1 }
                }
                return
            }
            let count = Int(request.tag) ?? 0
            let batch = request.platform.rawValue == 0 ? 500 : Int(request.platform.rawValue)
            for start in stride(from: 0, to: count, by: batch) {
                let registrations = (start..<min(start + batch, count)).map { Registration(registrationID: "r-\($0)") }
                try await stream.send(AudienceBatch(registrations: registrations))
            }
        }
        return table
    }

    /// Serves the table on `test.sock` (lean) and `test.grpc.sock` (gRPC), then runs `body` with a
    /// client of `transport`.
    /// The loops these servers and clients run on, apart from NIO's shared ones. The in-process
    /// stack tests run in this process on the shared loops, and a gRPC stream of 100,000 records
    /// keeps both of them busy for its whole 30 s under load: an NH client's requests to that stack
    /// waited out their RPC deadlines (503) or its own 30-s timeout until the stream ended.
    static let loops = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    static func withServers(
        _ transport: RPCTransport, health: HealthReporter = HealthReporter(),
        _ body: (RPCClient, String) async throws -> Void
    ) async throws {
        try await withServers(transport, health: health) { client, dir, _ in try await body(client, dir) }
    }

    /// The same, handing `body` a function that starts the servers' graceful shutdown.
    static func withServers(
        _ transport: RPCTransport, health: HealthReporter = HealthReporter(),
        _ body: (RPCClient, String, @Sendable () async -> Void) async throws -> Void
    ) async throws {
        var template = Array("/tmp/herald-rpc-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var table = table()
        health.register(into: &table)
        for service in table.services + [""] { health.set(service, .serving) }
        let logger = Logger(label: "test")
        let lean = LeanServer(
            table: table, socketPath: dir + "/test.sock", logger: logger, health: health, eventLoopGroup: loops)
        let grpc = try RPCServer(
            table: table, socketPath: dir + "/test.grpc.sock", logger: logger, health: health, eventLoopGroup: loops)
        let socket = dir + (transport == .lean ? "/test.sock" : "/test.grpc.sock")
        // Calls that should succeed get a minute: in CI's first pass this process starts beside the
        // integration tests' ~150 service processes, and was starved for ~17 s at the start (a call
        // at 20 s missed its deadline). Tests of deadlines pass their own.
        let client = try RPCClient(
            socketPath: socket, transport: transport, defaultTimeout: .seconds(60), eventLoopGroup: loops)
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: client), .init(service: lean), .init(service: grpc)], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                try await body(client, dir, { await group.triggerGracefulShutdown() })
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/test.sock"), "lean socket removed on shutdown")
        #expect(!FileManager.default.fileExists(atPath: dir + "/test.grpc.sock"), "gRPC socket removed on shutdown")
    }

    static func waitFor(_ condition: () -> Bool, timeout: Duration = .seconds(30)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            try await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    @Test(
        "a method started on the event loop runs there, and offEventLoop leaves it (lean); gRPC runs handlers off the loops"
    )
    func eventLoopStart() async throws {
        try await Self.withServers(.lean) { client, _ in
            let answer = try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "where"))
            #expect(answer.user == "started:true off:false")
        }
        try await Self.withServers(.grpc) { client, _ in
            let answer = try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "where"))
            #expect(answer.user == "started:false off:false")
        }
    }

    @Test("a unary call succeeds and carries the request id; sockets are 0660", arguments: RPCTransport.allCases)
    func unary(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, dir in
            let answer = try await AuthServiceClient(client).authenticate(
                AuthenticateRequest(authorization: "hello"), requestID: "req-42")
            #expect(answer == AuthenticateResponse(user: "hello", scheme: "req-42"))
            // The call proves only its own server listens; the other one may still be between bind and chmod.
            for socket in ["test.sock", "test.grpc.sock"] {
                let mode = {
                    (try? FileManager.default.attributesOfItem(atPath: "\(dir)/\(socket)"))?[.posixPermissions] as? Int
                }
                let set = try await Self.waitFor { mode() == 0o660 }
                #expect(set, "\(socket) mode \(mode().map { String($0, radix: 8) } ?? "missing")")
            }
        }
    }

    @Test("every status code reaches the caller with its message", arguments: RPCTransport.allCases)
    func everyStatusCode(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            for code in StatusCode.allCases where code != .ok {
                await #expect(throws: ServiceError(code, "status \(code.rawValue) as asked"), "\(code)") {
                    try await AuthServiceClient(client).authenticate(
                        AuthenticateRequest(authorization: "status:\(code.rawValue)"))
                }
            }
            await #expect(throws: ServiceError(.internal, "internal error")) {
                try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "boom"))
            }
            await #expect {
                try await DispatchServiceClient(client).send(SendRequest())
            } throws: { ($0 as? ServiceError)?.code == .unimplemented }
        }
    }

    @Test(
        "an error's metadata (retry-after, storage full) reaches the caller on both transports",
        arguments: RPCTransport.allCases)
    func errorMetadata(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let auth = AuthServiceClient(client)
            await #expect {
                try await auth.authenticate(AuthenticateRequest(authorization: "locked"))
            } throws: { error in
                let error = error as? ServiceError
                return error?.code == .resourceExhausted && error?.retryAfterSeconds == 42
                    && error?.message == "locked; retry after 42 s"
            }
            await #expect {
                try await auth.authenticate(AuthenticateRequest(authorization: "full"))
            } throws: { ($0 as? ServiceError)?.isStorageFull == true }
            // Plain errors carry none.
            await #expect {
                try await auth.authenticate(AuthenticateRequest(authorization: "status:5"))
            } throws: { ($0 as? ServiceError)?.metadata == [:] }
        }
    }

    @Test(
        "the caller's deadline ends a slow call, and the server cancels its handler", arguments: RPCTransport.allCases)
    func deadline(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let token = "deadline-\(transport)"
            // Connect first, so the deadline below is spent on the call, not on connection set-up.
            _ = try await HealthClient(client).check(HealthCheckRequest())
            await #expect {
                try await AuthServiceClient(client).authenticate(
                    AuthenticateRequest(authorization: "slow:\(token)"),
                    // Long enough for the call to reach its handler on a loaded CI machine (the
                    // check below); the handler itself never answers.
                    timeout: .seconds(5))
            } throws: { ($0 as? ServiceError)?.code == .deadlineExceeded }
            #expect(handlerEvents.withLock { $0.started.contains(token) }, "the call reached its handler")
            let seen1 = try await Self.waitFor { handlerEvents.withLock { $0.cancelled.contains(token) } }
            #expect(seen1)
        }
    }

    @Test("a caller that goes away cancels the handler", arguments: RPCTransport.allCases)
    func cancellation(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let token = "cancel-\(transport)"
            let call = Task {
                try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "slow:\(token)"))
            }
            let seen2 = try await Self.waitFor { handlerEvents.withLock { $0.started.contains(token) } }
            #expect(seen2)
            call.cancel()
            let seen3 = try await Self.waitFor { handlerEvents.withLock { $0.cancelled.contains(token) } }
            #expect(seen3)
            let result = await call.result
            #expect(throws: (any Error).self) { try result.get() }
        }
    }

    @Test("4 MiB messages go both ways", arguments: RPCTransport.allCases)
    func largeMessages(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let size = 4 << 20
            let stored = try await PayloadServiceClient(client).storePayload(
                StorePayloadRequest(content: (0..<size).map { UInt8(truncatingIfNeeded: $0) }))
            #expect(stored.id == Int64(size))
            #expect(stored.expiresAtUnixMs == Int64(UInt8(truncatingIfNeeded: size - 1)))
            let fetched = try await PayloadServiceClient(client).fetchPayload(FetchPayloadRequest(id: Int64(size)))
            #expect(fetched.content.count == size)
            #expect(fetched.content.last == UInt8(truncatingIfNeeded: size - 1))
        }
    }

    @Test("a message over the limit is refused clearly and the connection goes on", arguments: RPCTransport.allCases)
    func oversizeMessage(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            await #expect {
                try await PayloadServiceClient(client).storePayload(
                    StorePayloadRequest(content: [UInt8](repeating: 7, count: RPCLimits.maxMessageBytes + 1)))
            } throws: { ($0 as? ServiceError)?.code == .resourceExhausted }
            let answer = try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "after"))
            #expect(answer.user == "after")
        }
    }

    @Test("a server stream of 100,000 records arrives whole and in order", arguments: RPCTransport.allCases)
    func bigStream(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let received = Received()
            try await RegistrationServiceClient(client).streamAudience(
                StreamAudienceRequest(tag: "100000", platform: Platform(rawValue: 1)),
                timeout: .seconds(120)
            ) { batch in
                await received.append(batch.registrations.map(\.registrationID))
            }
            let ids = await received.ids
            #expect(ids.count == 100_000)
            #expect(ids.first == "r-0")
            #expect(ids.last == "r-99999")
            #expect(ids[50_000] == "r-50000")
        }
    }

    @Test("1,000 concurrent calls share one connection", arguments: RPCTransport.allCases)
    func concurrentCalls(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for i in 0..<1000 {
                    group.addTask {
                        // A generous deadline: this checks sharing one connection, not speed (debug
                        // gRPC on two busy cores needs more than the default 5 s for 1,000 calls).
                        (
                            i,
                            try await AuthServiceClient(client).authenticate(
                                AuthenticateRequest(authorization: "n\(i)"), timeout: .seconds(60)
                            ).user
                        )
                    }
                }
                var answers: [Int: String] = [:]
                for try await (i, user) in group { answers[i] = user }
                return answers
            }
            #expect(answers.count == 1000)
            #expect(answers.allSatisfy { "n\($0.key)" == $0.value })
        }
    }

    @Test("graceful shutdown lets a call in flight finish", arguments: RPCTransport.allCases)
    func drain(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _, shutdown in
            let token = "drain-\(transport)"
            let call = Task {
                try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "nap:\(token)"))
            }
            let started = try await Self.waitFor { handlerEvents.withLock { $0.started.contains(token) } }
            #expect(started)
            await shutdown()
            #expect(try await call.value.user == "nap:\(token)")
        }
    }

    @Test(
        "a server whose task is cancelled (a sibling service failed, no drain) stops with a connection open",
        arguments: RPCTransport.allCases)
    func cancelled(_ transport: RPCTransport) async throws {
        var template = Array("/tmp/herald-rpc-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let socket = dir + "/cancel.sock"
        let table = Self.table()
        let server: any Service =
            transport == .lean
            ? LeanServer(table: table, socketPath: socket, logger: Logger(label: "test"))
            : try RPCServer(table: table, socketPath: socket, logger: Logger(label: "test"))
        let running = Task { try await server.run() }
        let stopped = Atomic<Bool>(false)
        let watcher = Task {
            _ = await running.result
            stopped.store(true, ordering: .relaxed)
        }
        try await RPCClient.with(socketPath: socket, transport: transport, timeout: .seconds(20)) { client in
            _ = try await AuthServiceClient(client).authenticate(AuthenticateRequest(authorization: "x"))
            running.cancel()
            #expect(
                try await Self.waitFor { stopped.load(ordering: .relaxed) },
                "the server still runs after its cancellation")
        }
        // A server that never stops is left behind: the test has failed already.
        if stopped.load(ordering: .relaxed) { await watcher.value }
    }

    @Test("a slow stream reader holds the lean server back to its window")
    func backPressure() async throws {
        try await Self.withServers(.lean) { client, _ in
            let read = Mutex(0)
            let peak = Mutex(0)
            try await RegistrationServiceClient(client).streamAudience(StreamAudienceRequest(tag: "track:bp")) { _ in
                let consumed = read.withLock { value in
                    value += 1
                    return value
                }
                if consumed % 1000 == 0 { try await Task.sleep(for: .milliseconds(50)) }  // a reader that stalls
                let ahead = (streamProgress.withLock { $0["bp"] } ?? 0) - consumed
                peak.withLock { $0 = max($0, ahead) }
            }
            #expect(read.withLock { $0 } == 10_000)
            // The server may run ahead by the window (256) plus what is in flight, never by thousands.
            #expect(peak.withLock { $0 } <= 300, "server ran \(peak.withLock { $0 }) messages ahead of the reader")
        }
    }

    @Test("grpc.health.v1 reports the server and each service", arguments: RPCTransport.allCases)
    func health(_ transport: RPCTransport) async throws {
        try await Self.withServers(transport) { client, _ in
            for service in ["", "herald.v1.AuthService", "herald.v1.RegistrationService"] {
                let answer = try await HealthClient(client).check(HealthCheckRequest(service: service))
                #expect(answer.status == .serving)
            }
            await #expect {
                try await HealthClient(client).check(HealthCheckRequest(service: "nope"))
            } throws: { ($0 as? ServiceError)?.code == .notFound }
        }
    }

    @Test("grpc.health.v1 Watch streams each change of the status", arguments: RPCTransport.allCases)
    func healthWatch(_ transport: RPCTransport) async throws {
        let health = HealthReporter()
        try await Self.withServers(transport, health: health) { client, _ in
            health.track([""])
            let seen = Mutex<[HealthReporter.Status]>([])
            let watcher = Task {
                try await HealthClient(client).watch(HealthCheckRequest(service: ""), timeout: .seconds(30)) { answer in
                    seen.withLock { $0.append(answer.status) }
                }
            }
            defer { watcher.cancel() }
            let first = try await Self.waitFor { seen.withLock { $0 } == [.serving] }
            #expect(first)
            health.setCondition("database", false)
            let second = try await Self.waitFor { seen.withLock { $0 } == [.serving, .notServing] }
            #expect(second)
            health.setCondition("database", true)
            let third = try await Self.waitFor { seen.withLock { $0 } == [.serving, .notServing, .serving] }
            #expect(third, "\(seen.withLock { $0 })")
        }
    }

    @Test("an unreachable socket is UNAVAILABLE by the deadline", arguments: RPCTransport.allCases)
    func unreachable(_ transport: RPCTransport) async throws {
        _ = try await RPCClient.with(
            socketPath: "/tmp/herald-missing-\(UUID().uuidString.prefix(8)).sock", transport: transport
        ) {
            client in
            await #expect {
                try await HealthClient(client).check(HealthCheckRequest(), timeout: .milliseconds(300))
            } throws: { [.unavailable, .deadlineExceeded].contains(($0 as? ServiceError)?.code) }
        }
    }

    @Test("an oversize frame on the wire gets an ERROR frame and a clean close")
    func oversizeFrameOnTheWire() async throws {
        try await Self.withServers(.lean) { client, dir in
            _ = try await HealthClient(client).check(HealthCheckRequest())  // the server is listening
            let reply = try RawSocket.exchange(
                path: dir + "/test.sock",
                send: LeanProtocol.preface + [0x7f, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 1])
            #expect(Array(reply.prefix(8)) == LeanProtocol.preface)
            var buffer = ByteBuffer(bytes: reply.dropFirst(8))
            let frame = try #require(try LeanFrame.parse(&buffer, maxFrameBytes: LeanProtocol.defaultMaxFrameBytes))
            #expect(frame.kind == .error)
            #expect(try frame.status().message.contains("exceeds the limit"))
            #expect(buffer.readableBytes == 0, "nothing after the ERROR frame: the server closed")
        }
    }

    actor Received {
        var ids: [String] = []
        func append(_ more: [String]) { ids += more }
    }
}

/// A blocking Unix-socket client for feeding raw bytes to a server.
enum RawSocket {
    /// Connects, sends `bytes`, and reads until the server closes (or 5 s pass).
    static func exchange(path: String, send bytes: [UInt8]) throws -> [UInt8] {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        try #require(connected == 0)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            received += chunk[0..<n]
        }
        return received
    }
}
