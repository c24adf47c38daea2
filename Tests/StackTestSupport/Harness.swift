package import AsyncHTTPClient
package import Foundation
package import HeraldModel
package import HeraldProto
package import HeraldRPC
package import HeraldService
package import HeraldStack
package import HeraldTestSupport
package import NIOCore
package import NIOPosix
package import Testing

/// The repository root, for scripts and files the tests use.
package let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// A running stack in a temporary folder, and an HTTP client of its edge: the five services in this
/// process (``InProcessStack``, the default) or as the real executables (``Stack``, for what needs a
/// process: kill -9, SIGSTOP, restarts, a process's memory, metrics or environment).
package struct LiveStack {
    /// How the services run.
    package enum Runner: Sendable {
        /// In this test process, each service's `ServiceGroup` over real sockets and databases.
        case inProcess
        /// As child processes, supervised by ``Stack`` as `herald up` runs them.
        case processes
    }

    private enum Running {
        case inProcess(InProcessStack)
        case processes(Stack)
    }

    private let running: Running
    package let edge: EdgeClient
    package let configuration: StackConfiguration

    /// The supervisor of the child processes; throws for an in-process stack.
    package var stack: Stack {
        get throws {
            guard case .processes(let stack) = running else {
                throw StackError(
                    description: "this test needs the services as processes: LiveStack.with(runner: .processes)")
            }
            return stack
        }
    }

    /// The services that have stopped since the stack started: a process that exited (and was
    /// restarted), or an in-process service whose group ended. Empty while nothing has fallen over.
    package func stopped() async -> [String] {
        var stopped: [String] = []
        for service in Stack.services {
            switch running {
            case .processes(let stack): if await !stack.exitStatuses(of: service).isEmpty { stopped.append(service) }
            case .inProcess(let stack): if await !stack.isRunning(service) { stopped.append(service) }
            }
        }
        return stopped
    }

    /// A fresh folder under /tmp (short, so socket paths stay under the 108-byte limit).
    package static func makeDirectory() throws -> String {
        var template = Array("/tmp/herald-it-XXXXXX".utf8CString)
        guard let path = mkdtemp(&template) else { throw StackError(description: "mkdtemp failed") }
        return String(cString: path)
    }

    /// A fresh folder (``makeDirectory()``) for `body`: removed when `body` returns, kept when it
    /// throws or with `HERALD_TEST_KEEP_STACKS=1`, as ``with(runner:directory:auth:users:database:schemaPrefix:configure:_:)``
    /// treats the folder it makes. For a test that keeps more than its stack in the folder (the
    /// push doubles' certificates, a backup), and passes the stack a folder inside it.
    package static func withDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
        let folder = try makeDirectory()
        let result = try await body(folder)
        if ProcessInfo.processInfo.environment["HERALD_TEST_KEEP_STACKS"] != "1" {
            try? FileManager.default.removeItem(atPath: folder)
        }
        return result
    }

    /// Starts the stack in `directory` (a new one by default), runs `body`, and stops the stack.
    /// When `body` fails, every service's log is printed to help whoever reads the failure.
    ///
    /// A folder made here is removed when `body` returns (a full run starts about 500 stacks of a
    /// few MB each, and /tmp filled up with them) and kept when it throws;
    /// `HERALD_TEST_KEEP_STACKS=1` keeps every one, to read the logs of an `#expect` that failed.
    ///
    /// `auth` picks herald-auth's mode; in `accounts` mode each of `users` is created first with
    /// the password ``EdgeClient/password(of:in:)`` gives (and a cheap hash cost, for speed).
    ///
    /// `database` picks the stores: with `.postgres`, every service that has a PostgreSQL store
    /// keeps it in schema `<schemaPrefix>_<service>` of the test cluster (`HERALD_TEST_POSTGRES_URL`);
    /// pass the same prefix to find the same data again. `HERALD_TEST_STACK_DATABASE=postgres`
    /// makes PostgreSQL every stack's default, to run the whole suite on it.
    package static func with(
        runner: Runner = .inProcess,
        directory: String? = nil,
        auth: AuthModeCase = .tutorial,
        users: [String] = [],
        database: StoreBackend = defaultDatabase,
        schemaPrefix: String = TestDatabases.freshPrefix(),
        configure: (inout StackConfiguration) -> Void = { _ in },
        _ body: (LiveStack) async throws -> Void
    ) async throws {
        let made = directory == nil && ProcessInfo.processInfo.environment["HERALD_TEST_KEEP_STACKS"] != "1"
        var configuration = StackConfiguration(directory: try directory ?? makeDirectory())
        configuration.httpPort = 0
        configuration.captureLogs = true
        configuration.authMode = AuthMode(rawValue: auth.rawValue)!
        configuration.extraArguments["auth"] = ["--password-hash-log-n", "10"]
        // Tests that read a test send's results need them all; on a loaded 2-core machine one
        // push can take longer than the 10 s a production edge waits.
        configuration.extraArguments["edge"] = ["--nh-test-send-wait-ms", "90000"]
        if runner == .inProcess {
            // An in-process stack shares its test process's two cores with every other suite (the
            // RPC suite's 100,000-record stream and 1,000 concurrent calls among them): a call can
            // wait seconds for a thread, and the 5 s default made a register answer 503 in the
            // a CI run. No in-process test is about that deadline.
            for service in Stack.services {
                configuration.extraArguments[service, default: []] += ["--rpc-timeout-ms", "30000"]
            }
        }
        // A guard against a service that never comes up, not a measure of how fast one does: in
        // the first minute of CI's SQLite pass every suite of both test processes starts at once,
        // and an in-process herald-auth took 30 s to listen and its health checks 30 s more to
        // be answered (in CI); 60 s made that a failure.
        configuration.startTimeout = .seconds(150)
        configure(&configuration)
        if database == .postgres {
            for service in Stack.postgresServices {
                let url = try #require(
                    TestDatabases.freshPostgresURL(service: service, prefix: schemaPrefix), "HERALD_TEST_POSTGRES_URL")
                configuration.extraArguments[service, default: []] += ["--database-url", url]
            }
        }
        let running: Running
        switch runner {
        case .inProcess: running = .inProcess(InProcessStack(configuration: configuration))
        case .processes: running = .processes(Stack(configuration: configuration))
        }
        func stop() async {
            switch running {
            case .inProcess(let stack): await stack.stop()
            case .processes(let stack): await stack.stop()
            }
        }
        do {
            let edgeURL: String
            switch running {
            case .inProcess(let stack):
                try await stack.start()
                edgeURL = await stack.edgeURL
            case .processes(let stack):
                try await stack.start()
                edgeURL = await stack.edgeURL
            }
            let live = LiveStack(
                running: running, edge: EdgeClient(base: URL(string: edgeURL)!, auth: auth),
                configuration: configuration)
            if auth == .accounts {
                for user in users { try await live.addUser(user, password: EdgeClient.password(of: user, in: auth)) }
            }
            try await body(live)
            await stop()
            if made { try? FileManager.default.removeItem(atPath: configuration.directory) }
        } catch {
            await stop()
            printLogs(configuration)
            throw error
        }
    }

    package static var defaultDatabase: StoreBackend {
        ProcessInfo.processInfo.environment["HERALD_TEST_STACK_DATABASE"] == "postgres" ? .postgres : .sqlite
    }

    package static func printLogs(_ configuration: StackConfiguration) {
        for service in Stack.services {
            let path = "\(configuration.logDirectory)/\(service).log"
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            print("----- \(path) (last 40 lines)")
            print(text.split(separator: "\n", omittingEmptySubsequences: false).suffix(40).joined(separator: "\n"))
        }
    }

    /// Creates an account through herald-auth's RPC.
    /// Creates an account through herald-auth's RPC; with `send`, grants it Send on the default hub,
    /// so that it may send to other users and tags as the tutorial's users do (RolesTests check the
    /// refusal without it).
    package func addUser(_ user: String, password: String, send: Bool = true) async throws {
        _ = try await RPCClient.with(
            socketPath: configuration.socketPath("auth"), transport: configuration.rpcTransport, timeout: .testRPC
        ) { client in
            let auth = AuthServiceClient(client)
            _ = try await auth.createUser(CreateUserRequest(user: user, password: password))
            if send {
                _ = try await auth.grantHubRights(GrantHubRightsRequest(hub: "default", user: user, rights: [.send]))
            }
        }
    }

    /// `herald ARGUMENTS` against this stack's sockets (the CLI an operator runs beside it).
    package func herald(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
        try await runProgram(
            configuration.binDirectory + "/herald", arguments + ["--runtime-dir", configuration.runtimeDirectory])
    }

    /// Sets `hub`'s API request rate through herald-auth's RPC (its other limits: none).
    package func setRequestRate(hub: String, perSecond: Int64, burst: Int64) async throws {
        _ = try await RPCClient.with(
            socketPath: configuration.socketPath("auth"), transport: configuration.rpcTransport, timeout: .testRPC
        ) { client in
            try await AuthServiceClient(client).setHubLimits(
                SetHubLimitsRequest(hub: hub, requestsPerSecond: perSecond, requestBurst: burst))
        }
    }

    /// Registers a device for `user` the way the iOS client does; returns the registration id.
    @discardableResult
    package func register(_ user: String, platform: String = "apns", handle: String, tags: [String] = []) async throws
        -> String
    {
        let created = try await edge.request(
            "POST",
            "/api/register?handle=\(handle.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? handle)",
            as: user)
        try #require(created.status == 200, "POST api/register: \(created.status) \(created.text)")
        let id = try #require(
            try JSONSerialization.jsonObject(with: created.body, options: .fragmentsAllowed) as? String)
        let body = try JSONSerialization.data(withJSONObject: ["Platform": platform, "Handle": handle, "Tags": tags])
        let put = try await edge.request(
            "PUT", "/api/register/\(id)", as: user, body: String(decoding: body, as: UTF8.self))
        try #require(put.status == 200, "PUT api/register: \(put.status) \(put.text)")
        return id
    }

    /// Every service's log so far, concatenated.
    package func logs() -> String {
        Stack.services.compactMap {
            try? String(contentsOfFile: "\(configuration.logDirectory)/\($0).log", encoding: .utf8)
        }
        .joined(separator: "\n")
    }

    /// The lines of one service's log that are JSON objects (a service run with `--log-format json`).
    package func jsonLogLines(_ service: String) throws -> [[String: Any]] {
        let text = try String(contentsOfFile: "\(configuration.logDirectory)/\(service).log", encoding: .utf8)
        return text.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Everything the inbox provider has recorded.
    package func inbox() async throws -> [InboxEntry] {
        try await RPCClient.with(
            socketPath: configuration.socketPath("dispatch"), transport: configuration.rpcTransport, timeout: .testRPC
        ) { client in
            try await DispatchServiceClient(client).listInbox(ListInboxRequest(limit: 1000)).entries
        }
    }

    /// Polls the inbox until `count` entries match, or fails after `timeout`.
    package func waitForInbox(count: Int = 1, timeout: Duration = .seconds(10), where match: (InboxEntry) -> Bool)
        async throws
        -> [InboxEntry]
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = try await inbox().filter(match)
            if found.count >= count || ContinuousClock.now >= deadline { return found }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// The integration tests' HTTP client, on event loops of its own.
///
/// `HTTPClient.shared` runs on NIO's singleton loops, which every server and client in this
/// process shares: the push doubles, and the in-process RPC transport tests when both suites run
/// in one process. A gRPC stream of 100,000 records held a loop for a second at a time there (a
/// debug build on two busy cores), and the kill -9 drill counted four answers that the edge had
/// logged within 50 ms as hangs of 15 s: their responses sat unread on the held loop. A device's
/// client does not share its I/O threads with the test's other servers; neither does this one.
package let testHTTPClient = HTTPClient(
    eventLoopGroup: MultiThreadedEventLoopGroup(numberOfThreads: 2), configuration: .singletonConfiguration)

/// HTTP the way the tutorial's iOS client speaks it: Basic auth, JSON bodies, status codes.
package struct EdgeClient: Sendable {
    package let base: URL
    package var auth: AuthModeCase = .tutorial

    package init(base: URL, auth: AuthModeCase = .tutorial) {
        self.base = base
        self.auth = auth
    }

    /// A user's password in the tests: the user name in tutorial mode (the tutorial's rule), a
    /// longer one in accounts mode.
    package static func password(of user: String, in mode: AuthModeCase) -> String {
        mode == .tutorial ? user : "pw-\(user)-Zq9!"
    }

    package struct Reply {
        package var status: Int
        package var headers: [String: String]
        package var body: Data

        package init(status: Int, headers: [String: String], body: Data) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        package var text: String { String(decoding: body, as: UTF8.self) }

        package func json() throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any], "not a JSON object: \(text)")
        }

        package func header(_ name: String) -> String? {
            headers.first { $0.key.lowercased() == name.lowercased() }?.value
        }
    }

    package static func basic(_ user: String, _ password: String? = nil) -> String {
        "Basic " + Data("\(user):\(password ?? user)".utf8).base64EncodedString()
    }

    package func request(
        _ method: String, _ path: String, authorization: String? = nil, body: String? = nil,
        headers extra: [(String, String)] = [], timeout: TimeAmount = .seconds(30)
    ) async throws -> Reply {
        try await request(
            method, path, authorization: authorization, bytes: body.map { Data($0.utf8) },
            contentType: "application/json", headers: extra, timeout: timeout)
    }

    package func request(
        _ method: String, _ path: String, authorization: String?, bytes: Data?, contentType: String,
        headers extra: [(String, String)] = [], timeout: TimeAmount = .seconds(30)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: base.absoluteString + path)
        request.method = .RAW(value: method)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        for (name, value) in extra { request.headers.add(name: name, value: value) }
        if let bytes {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: bytes))
        }
        let response = try await testHTTPClient.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 64 << 20)
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name] = header.value }
        return Reply(status: Int(response.status.code), headers: headers, body: Data(bytes.readableBytesView))
    }

    /// As user `user`, with the password the tests give them in this auth mode.
    package func request(_ method: String, _ path: String, as user: String, body: String? = nil) async throws -> Reply {
        try await request(method, path, authorization: Self.basic(user, Self.password(of: user, in: auth)), body: body)
    }

    /// As user `user`, uploading `bytes` of `contentType`.
    package func upload(_ path: String, as user: String, bytes: Data, contentType: String) async throws -> Reply {
        try await request(
            "POST", path, authorization: Self.basic(user, Self.password(of: user, in: auth)), bytes: bytes,
            contentType: contentType)
    }
}

extension Trait where Self == ConditionTrait {
    /// For a stack test whose subject has no store (a transport, the edge's drain): it runs in the
    /// SQLite pass only, so CI's PostgreSQL pass spends its cores on what PostgreSQL changes.
    package static var storeIndependent: Self {
        .enabled(if: LiveStack.defaultDatabase == .sqlite, "does not depend on the store: runs in the SQLite pass")
    }

    /// For a stack test pinned to SQLite (`database: .sqlite`): both passes would run the same
    /// thing, so it runs in the SQLite pass only.
    package static var sqliteStack: Self {
        .enabled(if: LiveStack.defaultDatabase == .sqlite, "its stack is on SQLite in either pass: run once")
    }

    /// For a stack test that runs on each backend itself (`arguments: StoreBackend.available`): the
    /// PostgreSQL pass would run the same cases again, so it runs in the SQLite pass only.
    package static var everyBackendItself: Self {
        .enabled(if: LiveStack.defaultDatabase == .sqlite, "runs on each backend itself: run once")
    }
}

extension Duration {
    /// The deadline of the tests' own RPCs (reading the inbox, outcomes, creating users): a CI
    /// machine runs many stacks on two cores, and a 5 s read there can miss its deadline with the
    /// service healthy. The services' own deadlines are what the drills measure, not these.
    package static let testRPC = Duration.seconds(30)
}

/// The auth modes the contract tests run in.
package enum AuthModeCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case tutorial, accounts
    package var testDescription: String { rawValue }
}

/// A well-formed fake APNs device token (64 hex digits).
package func apnsToken(_ seed: Int) -> String {
    (0..<32).map { i in String(format: "%02x", (seed &* 31 &+ i) & 0xff) }.joined()
}

extension Sequence {
    /// `transform` applied in order, awaiting each.
    package func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
