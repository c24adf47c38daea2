import AsyncHTTPClient
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Synchronization
import Testing

/// What a platform team operates on: health that follows the database and dependencies, /readyz,
/// JSON logs that follow one request across services.
@Suite("operations end to end", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct OperationsTests {
    /// Polls `condition` every 50 ms until it holds or `timeout` passes; returns the last answer.
    func eventually(_ timeout: Duration = .seconds(15), _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return try await condition()
    }

    func healthy(_ live: LiveStack, _ service: String) async -> Bool {
        await HeraldProcess.checkHealth(socketPath: live.configuration.leanSocketPath(service))
    }

    func readiness(_ live: LiveStack) async throws -> (status: Int, services: [String: String]) {
        let reply = try await live.edge.request("GET", "/readyz")
        return (reply.status, try reply.json()["services"] as? [String: String] ?? [:])
    }

    @Test(
        "health goes NOT_SERVING when the database cannot be written or a dependency stops, and back; /readyz follows",
        .sqliteStack)
    func healthFollowsDependencies() async throws {
        // SQLite files made unwritable by hand: this drill is about the embedded store.
        try await LiveStack.with(
            runner: .processes,
            database: .sqlite,
            configure: { configuration in
                for service in Stack.rpcServices {
                    configuration.extraArguments[service, default: []] += ["--health-interval-ms", "200"]
                }
            }
        ) { live in
            #expect(try await readiness(live).status == 200)

            // The payload database becomes unwritable (immutable even for root).
            let database = live.configuration.dataDirectory + "/payload.sqlite"
            let files = [database, database + "-wal"]
            let locked = try await runProgram("/usr/bin/chattr", ["+i"] + files)
            try #require(locked.status == 0, "chattr +i failed: \(locked.error)")
            defer { _ = try? runProgramBlocking("/usr/bin/chattr", ["-i"] + files) }
            #expect(await eventually { await !healthy(live, "payload") })
            #expect(try await eventually { try await readiness(live) == (503, readinessWith(payload: "NOT_SERVING")) })
            #expect(await healthy(live, "auth"))

            #expect(try await runProgram("/usr/bin/chattr", ["-i"] + files).status == 0)
            #expect(await eventually { await healthy(live, "payload") })
            #expect(try await eventually { try await readiness(live).status == 200 })

            // A dependency stops answering: dispatch (which calls registration) follows it.
            let registration = try #require(try await live.stack.pid(of: "registration"))
            kill(registration, SIGSTOP)
            defer { kill(registration, SIGCONT) }
            #expect(await eventually { await !healthy(live, "dispatch") })
            #expect(try await eventually { try await readiness(live).status == 503 })
            kill(registration, SIGCONT)
            #expect(await eventually { await healthy(live, "dispatch") })
            #expect(try await eventually { try await readiness(live).status == 200 })
        }
    }

    func readinessWith(payload: String) -> [String: String] {
        ["auth": "SERVING", "registration": "SERVING", "payload": payload, "dispatch": "SERVING"]
    }

    @Test(
        "with log-format json every log line is JSON, and one request id shows in edge, auth, payload and dispatch",
        .storeIndependent)
    func requestIDAcrossServices() async throws {
        try await LiveStack.with(
            runner: .processes,
            configure: { configuration in
                configuration.logLevel = "debug"
                for service in Stack.services {
                    configuration.extraArguments[service, default: []] += ["--log-format", "json"]
                }
            }
        ) { live in
            let token = apnsToken(30)
            try await live.register("gina", handle: token)
            let requestID = "it-trace-" + UUID().uuidString.prefix(8).lowercased()
            let sent = try await live.edge.request(
                "POST", "/api/notifications", authorization: EdgeClient.basic("gina"), bytes: nil, contentType: "",
                headers: [("X-Request-Id", requestID)])
            #expect(sent.status == 200)
            #expect(sent.header("X-Request-Id") == requestID)
            _ = try await live.waitForInbox { $0.handle == token }

            for service in ["edge", "auth", "payload", "dispatch"] {
                let found = try await eventually(.seconds(5)) {
                    try live.jsonLogLines(service).contains { $0["herald.request_id"] as? String == requestID }
                }
                #expect(found, "no log line of herald-\(service) carries request id \(requestID)")
            }
            for service in Stack.services {
                let text =
                    (try? String(contentsOfFile: "\(live.configuration.logDirectory)/\(service).log", encoding: .utf8))
                    ?? ""
                for line in text.split(separator: "\n") {
                    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                    #expect(
                        object?["level"] != nil && object?["message"] != nil,
                        "herald-\(service): not a JSON log line: \(line)")
                }
            }
        }
    }

    @Test("metrics: /metrics on the edge and metrics-listen on a service show the named series after traffic")
    func metrics() async throws {
        try await LiveStack.with(
            runner: .processes,
            configure: { configuration in
                for service in ["payload", "dispatch"] {
                    configuration.extraArguments[service, default: []] += ["--metrics-listen", "127.0.0.1:0"]
                }
            }
        ) { live in
            let token = apnsToken(31)
            try await live.register("hana", handle: token)
            #expect(try await live.edge.request("POST", "/api/notifications", as: "hana").status == 200)
            _ = try await live.waitForInbox { $0.handle == token }

            let edge = try await live.edge.request("GET", "/metrics")
            #expect(edge.status == 200)
            #expect(edge.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
            #expect(
                StackFixture.value(
                    edge.text, "herald_http_requests_total", ["route=\"/api/notifications\"", "status=\"200\""])
                    >= 1)
            #expect(
                StackFixture.value(edge.text, "herald_http_request_duration_seconds_count", ["route=\"/api/register\""])
                    >= 1)
            #expect(
                StackFixture.value(
                    edge.text, "herald_http_requests_total", ["route=\"/api/register/{id}\"", "status=\"200\""])
                    >= 1)

            func scrape(_ service: String) async throws -> String {
                let file = "\(live.configuration.runtimeDirectory)/\(service).metrics.url"
                let url = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(
                    in: .whitespacesAndNewlines)
                let base = URL(string: url)!.deletingLastPathComponent()
                return try await EdgeClient(base: base).request("GET", "metrics").text
            }
            let payload = try await scrape("payload")
            #expect(
                StackFixture.value(
                    payload, "herald_rpc_requests_total", ["PayloadService/StorePayload", "status=\"OK\""]) == 1)
            #expect(
                StackFixture.value(payload, "herald_rpc_duration_seconds_count", ["PayloadService/StorePayload"]) == 1)
            // The inbox row is written before the worker records the result: poll for the counters.
            var dispatch = try await scrape("dispatch")
            let deadline = ContinuousClock.now + .seconds(10)
            while StackFixture.value(dispatch, "herald_sends_total", ["COMPLETED"]) < 1, ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(50))
                dispatch = try await scrape("dispatch")
            }
            #expect(StackFixture.value(dispatch, "herald_sends_total", ["COMPLETED"]) == 1)
            #expect(
                StackFixture.value(dispatch, "herald_deliveries_total", ["platform=\"apns\"", "outcome=\"delivered\""])
                    == 1)
        }
    }

    @Test(
        "a caller with a foreign UID is refused by SO_PEERCRED even when the socket's mode lets it in",
        .storeIndependent)
    func foreignPeerRefused() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), "setpriv (util-linux) is needed")
        try #require(getuid() == 0, "the test switches to another user, which needs root")
        try await LiveStack.with(runner: .processes) { live in
            let configuration = live.configuration
            // Open the file-system layer wide, so only the peer-credential check stands in the way.
            for folder in [configuration.directory, configuration.runtimeDirectory] { chmod(folder, 0o755) }
            let lean = configuration.leanSocketPath("payload")
            let grpc = configuration.grpcSocketPath("payload")
            for socket in [lean, grpc] { chmod(socket, 0o666) }
            let payload = configuration.binDirectory + "/herald-payload"
            let asOwner = ["--check-health", "--runtime-dir", configuration.runtimeDirectory]
            let leanArguments = asOwner + ["--socket", lean]
            let grpcArguments = asOwner + ["--socket", "off", "--grpc-socket", grpc, "--rpc-transport", "grpc"]
            #expect(try await runProgram(payload, leanArguments).status == 0)
            #expect(try await runProgram(payload, grpcArguments).status == 0)

            let nobody = ["--reuid", "65534", "--regid", "65534", "--clear-groups", payload]
            #expect(try await runProgram("/usr/bin/setpriv", nobody + leanArguments).status == 1)
            #expect(try await runProgram("/usr/bin/setpriv", nobody + grpcArguments).status == 1)
            let log = try String(contentsOfFile: "\(configuration.logDirectory)/payload.log", encoding: .utf8)
            #expect(log.contains("refused a caller (lean)") && log.contains("peer uid 65534 gid 65534 is not allowed"))
            #expect(log.contains("refused a caller (grpc)"))
            // The owner still gets through afterwards.
            #expect(try await runProgram(payload, leanArguments).status == 0)
        }
    }

    @Test(
        "SIGTERM during 200 in-flight requests: the edge completes them all and exits 0 within its drain timeout",
        .storeIndependent)
    func drainUnderLoad() async throws {
        try await LiveStack.with(
            runner: .processes,
            auth: .accounts, users: ["ivan"],
            configure: { configuration in
                // Every request pays a real (cheap) scrypt hash on auth's two hashing threads, so 200
                // requests take seconds and are still in flight when the edge gets SIGTERM: neither
                // auth's credential cache nor the edge's reuse of auth's verdicts may answer them.
                configuration.extraArguments["auth"] = [
                    "--password-hash-log-n", "11", "--credential-cache-seconds", "0", "--verdict-cache-seconds", "0",
                    "--max-failed-logins", "1000",
                    // This test wants every request queued behind the hash threads: no login gate.
                    "--max-pending-logins", "10000", "--max-login-wait-ms", "600000",
                ]
                // Signalled once every head is read, all ~200 requests are still waiting on a hash:
                // on CI's loaded two cores that took 20 s once. The drain timeout is the promise
                // under test, not the machine's speed, so it is set well above that.
                configuration.extraArguments["edge"] = ["--drain-timeout-ms", "90000", "--rpc-timeout-ms", "90000"]
            }
        ) { live in
            var httpConfiguration = HTTPClient.Configuration()
            httpConfiguration.connectionPool = .init(
                idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 256)
            let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
            do {
                let edgePID = try #require(try await live.stack.pid(of: "edge"))
                let url = live.edge.base.absoluteString + "/api/register"
                let authorization = EdgeClient.basic("ivan", EdgeClient.password(of: "ivan", in: .accounts))
                let terminated = Signalled()

                let results = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                    for _ in 0..<200 {
                        group.addTask {
                            var request = HTTPClientRequest(url: url)
                            request.method = .POST
                            request.headers.add(name: "Authorization", value: authorization)
                            let response = try await http.execute(request, timeout: .seconds(120))
                            _ = try await response.body.collect(upTo: 1 << 20)
                            return (Int(response.status.code), terminated.at != nil)
                        }
                    }
                    group.addTask {
                        // Signal once the edge has read all 200 request heads (the scrape's own head
                        // counts too), not after a guessed sleep: on a loaded machine 200 connections
                        // may take longer than any fixed wait to reach the edge.
                        var scrapes = 0.0
                        let read = try await eventually(.seconds(60)) {
                            scrapes += 1
                            let text = try await live.edge.request("GET", "/metrics").text
                            return StackFixture.value(text, "herald_http_request_heads_total", []) - scrapes >= 200
                        }
                        try #require(read, "the edge did not read 200 request heads within 60 s")
                        terminated.mark()
                        kill(edgePID, SIGTERM)
                        return (-1, true)
                    }
                    return try await group.reduce(into: [(Int, Bool)]()) { $0.append($1) }.filter { $0.0 != -1 }
                }
                #expect(results.count == 200)
                #expect(
                    results.allSatisfy { $0.0 == 200 },
                    "statuses: \(Dictionary(grouping: results.map(\.0), by: { $0 }).mapValues(\.count))"
                )
                let afterSignal = results.filter(\.1).count
                #expect(afterSignal > 0, "no request was still in flight at SIGTERM, so the drain was not tested")
                print("drain under load: \(afterSignal) of 200 requests completed after SIGTERM")

                let exited = try await eventually(.seconds(100)) {
                    try await live.stack.exitStatuses(of: "edge").isEmpty == false
                }
                #expect(exited)
                #expect(try await live.stack.exitStatuses(of: "edge").first == 0)
                let drained = ContinuousClock.now - (terminated.at ?? .now)
                #expect(drained < .seconds(90), "the edge took \(drained) to exit")
                print("drain under load: the edge exited \(drained) after SIGTERM")
                try await http.shutdown()
            } catch {
                try? await http.shutdown()
                throw error
            }
        }
    }

    @Test("a service that cannot start logs its cause at error level and exits 1, never by a signal")
    func startupFailureIsReported() async throws {
        var template = Array("/tmp/herald-start-XXXXXX".utf8CString)
        let directory = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The gRPC listener binds; the lean one cannot (its socket's folder is a file), so one
        // service of the group fails while the others run and must be cancelled.
        FileManager.default.createFile(atPath: directory + "/file", contents: Data())
        let payload = Stack.defaultBinDirectory() + "/herald-payload"
        let result = try await runProgram(
            payload,
            [
                "--runtime-dir", directory + "/run", "--data-dir", directory + "/data", "--socket",
                directory + "/file/payload.sock",
                "--log-format", "json",
            ])
        #expect(result.status == 1, "exit status \(result.status): \(result.error)")
        let failure = result.error.split(separator: "\n").first {
            $0.contains("\"level\":\"error\"") && $0.contains("failed")
        }
        #expect(failure?.contains("payload.sock") == true, "no error line names the cause: \(result.error)")
    }

    @Test(
        "SIGTERM: a request sent on an open connection once the drain began is answered with Connection: close; an idle connection closes having lost nothing; new connections are refused"
    )
    func drainPromise() async throws {
        try await LiveStack.with(
            runner: .processes,
            configure: { configuration in
                configuration.extraArguments["edge", default: []] += [
                    "--drain-idle-grace-ms", "5000", "--drain-timeout-ms", "20000",
                ]
            }
        ) { live in
            let edgePID = try #require(try await live.stack.pid(of: "edge"))
            let base = live.edge.base.absoluteString
            // Scrapes on connections of their own, so the gauge counts only this test's connections
            // besides the scrape itself (no pooled client connection opens in between).
            func openConnections() async throws -> Double {
                let scrape = try RawConnection(url: base)
                try scrape.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                let text = await offPool { scrape.read(timeout: .seconds(10)).text }
                return StackFixture.value(text, "herald_http_connections", [])
            }
            let baseline = try await openConnections()
            // Idle from the start: never sends a byte.
            let idle = try RawConnection(url: base)
            // Opened now, sends its first request only once the drain has begun.
            let fresh = try RawConnection(url: base)
            // Keep-alive: one answer before the signal, its next request after.
            let kept = try RawConnection(url: base)
            try kept.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            let first = await offPool { kept.readResponse(timeout: .seconds(10)) }
            #expect(first.hasPrefix("HTTP/1.1 200"), "\(first)")
            #expect(!first.lowercased().contains("connection: close"), "\(first)")
            #expect(
                try await eventually(.seconds(30)) { try await openConnections() >= baseline + 3 },
                "the edge did not accept the connections")

            kill(edgePID, SIGTERM)
            // The listener closes as the drain starts; from then on a connection is refused.
            let refused = await eventually(.seconds(20)) { (try? RawConnection(url: base)) == nil }
            #expect(refused, "the edge still accepts connections after SIGTERM")

            let request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            try fresh.send(request)
            try kept.send(request)
            for (name, connection) in [("fresh", fresh), ("keep-alive", kept)] {
                let answer = await offPool { connection.read(timeout: .seconds(15)) }
                #expect(answer.text.hasPrefix("HTTP/1.1 200"), "\(name): \(answer.text)")
                #expect(answer.text.lowercased().contains("connection: close"), "\(name): \(answer.text)")
                #expect(answer.closed, "\(name): the edge kept the connection open after answering during the drain")
            }
            let silent = await offPool { idle.read(timeout: .seconds(15)) }
            #expect(silent.closed && silent.text.isEmpty, "the idle connection got \(silent)")

            #expect(
                try await eventually(.seconds(30)) { try await live.stack.exitStatuses(of: "edge").isEmpty == false })
            let status = try await live.stack.exitStatuses(of: "edge").first
            #expect(status == 0)
            if status != 0 {
                print(
                    (try? String(contentsOfFile: "\(live.configuration.logDirectory)/edge.log", encoding: .utf8))
                        ?? "no edge log")
            }
        }
    }
}

/// When a signal was sent, shared with the tasks that watch for it.
final class Signalled: Sendable {
    private let instant = Mutex<ContinuousClock.Instant?>(nil)
    var at: ContinuousClock.Instant? { instant.withLock { $0 } }
    func mark() { instant.withLock { $0 = .now } }
}

@Suite("service executables' --help", .watchedForStalls)
struct ServiceHelpTests {
    @Test(
        "every service executable answers --help with its settings and their environment variables, exit 0; a typo names --help"
    )
    func help() async throws {
        let bin = StackConfiguration(directory: "/tmp").binDirectory
        for service in Stack.services {
            let help = try await runProgram("\(bin)/herald-\(service)", ["--help"])
            #expect(help.status == 0, "herald-\(service): \(help.error)")
            for line in [
                "USAGE: herald-\(service)", "--rpc-timeout-ms", "HERALD_RPC_TIMEOUT_MS", "--log-level",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ] {
                #expect(help.output.contains(line), "herald-\(service) --help lacks \(line)")
            }
            let typo = try await runProgram("\(bin)/herald-\(service)", ["--log-levle", "debug"])
            #expect(
                typo.status == 2 && typo.error.contains("unknown setting --log-levle (--help lists the settings)"),
                "\(typo.error)")
            // An OTEL_* value Herald cannot honour stops the start with its name, never tracing silently off.
            let otel = try await runProgram(
                "\(bin)/herald-\(service)", ["--runtime-dir", "/nonexistent/herald-help"],
                environment: ["OTEL_TRACES_SAMPLER": "sometimes", "OTEL_TRACES_EXPORTER": "otlp"])
            #expect(otel.status == 2 && otel.error.contains("OTEL_TRACES_SAMPLER"), "\(otel.error)")
        }
        let edge = try await runProgram("\(bin)/herald-edge", ["--help"])
        #expect(edge.output.contains("--nh-test-send-wait-ms") && edge.output.contains("--registration-address"))
    }
}
