import Crypto
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench fanout --provider apns|fcm`: the fan-out through the real APNs sender (HTTP/2,
/// TLS, an ES256 provider token), or the FCM v1 sender (an OAuth token from the service account),
/// to ``APNsDoubleCommand`` in its own process: deliveries/s until the
/// outcome is final, herald-dispatch's CPU per delivery, and, as the baseline, what the double
/// answers on its own when h2load (Debian's nghttp2-client) drives it, so the figure shows whether
/// Herald or the double is the limit.
struct APNsFanoutScenario {
    var options: BenchOptions
    var platform = Platform.apns
    /// APNs only: nghttpd (Debian's nghttp2-server, `--echo-upload`: 200 for every POST) instead
    /// of the double, an HTTP/2 server no one here wrote. It checks no token, so only Herald's side
    /// of the figure is comparable with the double's.
    var nghttpd = false

    var scenario: String { platform == .apns ? (nghttpd ? "fanout-apns-nghttpd" : "fanout-apns") : "fanout-fcm" }
    var provider: String { platform == .apns ? "APNs" : "FCM v1" }
    var server: String { nghttpd ? "nghttpd" : "the double" }

    func run() async throws -> Report {
        guard let h2load = which("h2load") else {
            throw BenchError("h2load is missing: apt-get install -y nghttp2-client (scripts/setup.sh --bench does it)")
        }
        // Quick (CI, debug binaries): 500, since a debug sender and double answer a few hundred a second.
        let count = options.quick ? 500 : options.fanoutSize
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var configuration = StackConfiguration.bench(dir: dir)
        try FanoutScenario(options: options).seedRegistrations(
            count, path: configuration.dataDirectory + "/registration.sqlite", platform: platform)
        let double =
            nghttpd
            ? try await APNsDoubleProcess.startNghttpd(dir: dir)
            : try await APNsDoubleProcess.start(dir: dir, fcm: platform == .fcm)
        defer { double.stop() }
        configuration.extraArguments["dispatch", default: []] +=
            platform == .fcm ? double.fcmArguments : double.dispatchArguments

        let stack = Stack(configuration: configuration)
        try await stack.start()
        let sent: FanoutRun
        let dispatchCPU: Double
        let doubleCPU: Double
        do {
            guard let dispatch = await stack.pid(of: "dispatch") else {
                throw BenchError("herald-dispatch is not running")
            }
            let dispatchBefore = try RPCScenario.cpuSeconds(pid: dispatch)
            let doubleBefore = try RPCScenario.cpuSeconds(pid: double.process.processIdentifier)
            sent = try await FanoutRun.send(socket: configuration.socketPath("dispatch"), platform: platform)
            dispatchCPU = try RPCScenario.cpuSeconds(pid: dispatch) - dispatchBefore
            doubleCPU = try RPCScenario.cpuSeconds(pid: double.process.processIdentifier) - doubleBefore
            await stack.stop()
        } catch {
            await stack.stop()
            throw error
        }
        // nghttpd keeps no count: the outcome's is the check.
        let stats = nghttpd ? APNsDoubleStats(delivered: count) : try await double.waitFor(delivered: count)
        guard sent.delivered == count, stats.delivered == count, stats.refused == 0 else {
            throw BenchError(
                "\(provider) fan-out: outcome says \(sent.delivered) delivered, the double answered \(stats.delivered) with 200 and refused \(stats.refused), of \(count)"
            )
        }

        // The double alone: h2load with the same headers and body, 4 connections × 100 streams.
        let alone = try double.h2load(h2load, requests: options.quick ? 2_000 : 300_000, dir: dir, platform: platform)
        let rate = Double(count) / sent.elapsed.seconds
        var report = Report()
        report.records.append(
            Record(
                scenario, "\(count) deliveries through the \(provider) sender: deliveries/s", unit: "/s", value: rate,
                baseline: "\(server) alone under h2load", baselineValue: alone.rate, better: "higher",
                target: nghttpd ? "≥ 45,000/s" : "≥ 50,000/s"))
        report.records.append(
            Record(
                scenario, "herald-dispatch CPU per delivery", unit: "µs", value: dispatchCPU * 1e6 / Double(count),
                baseline: "\(server)'s CPU per request", baselineValue: doubleCPU * 1e6 / Double(count),
                better: "lower",
                target: "≤ 20 µs"))
        report.tables = [
            """
            ## \(scenario): one send to \(count) \(provider) registrations through the real sender to \(nghttpd ? "nghttpd (--echo-upload)" : "a double in its own process")

            | | requests | seconds | per second | CPU µs per request |
            |---|---:|---:|---:|---:|
            | Herald: Send → outbox → \(provider) sender → every answer recorded | \(count) | \(String(format: "%.2f", sent.elapsed.seconds)) | \(format(rate)) | dispatch \(format(dispatchCPU * 1e6 / Double(count))) |
            | of which: Send answered (audience read, outbox committed) | \(count) | \(String(format: "%.2f", sent.commit.seconds)) | \(format(Double(count) / sent.commit.seconds)) | |
            | \(server) during Herald's fan-out | \(count) | | | \(server) \(format(doubleCPU * 1e6 / Double(count))) |
            | \(server) alone, h2load -c 4 -m 100 | \(alone.requests) | \(String(format: "%.2f", alone.seconds)) | \(format(alone.rate)) | \(server) \(format(alone.doubleCPUMicros)) |

            \(nghttpd ? "nghttpd answered every POST with 200 and checked no token." : "The double checked \(stats.verifications) \(platform == .apns ? "provider tokens (once per connection, as APNs does)" : "token requests") over \(stats.connections) connections.")
            """
        ]
        return report
    }
}

/// One send to the tag "fanout", timed until its outcome is final.
struct FanoutRun {
    var elapsed: Duration
    /// Until Send answered (the outbox committed).
    var commit: Duration
    var delivered: Int

    static func send(socket: String, platform: Platform) async throws -> FanoutRun {
        let started = ContinuousClock.now
        let acknowledged = Mutex(started)
        let outcome = try await RPCClient.with(socketPath: socket, timeout: .seconds(3600)) { client -> Outcome? in
            let sent = try await DispatchServiceClient(client).send(
                SendRequest(
                    targetTag: "fanout",
                    payloads: [
                        platform == .apns
                            ? NativePayload(
                                platform: .apns, body: Array(#"{"aps":{"alert":"fan-out"}}"#.utf8), pushType: "alert")
                            : NativePayload(
                                platform: platform, body: Array(#"{"notification":{"title":"fan-out"}}"#.utf8))
                    ],
                    sender: "bench")
            ).outcome
            acknowledged.withLock { $0 = .now }
            var outcome = sent
            while let current = outcome, current.state == .enqueued || current.state == .processing {
                try await Task.sleep(for: .milliseconds(20))
                outcome = try await DispatchServiceClient(client).getOutcome(
                    GetOutcomeRequest(notificationID: current.notificationID, scope: .all))
            }
            return outcome
        }
        return FanoutRun(
            elapsed: ContinuousClock.now - started, commit: acknowledged.withLock { $0 } - started,
            delivered: outcome?.platforms.reduce(0) { $0 + Int($1.success) } ?? 0)
    }
}

/// The APNs double's process, its certificate (a CA of its own) and the provider key.
struct APNsDoubleProcess {
    static let keyID = "BENCHKEY01"
    static let teamID = "BENCHTEAM1"
    static let topic = "com.example.bench"

    var process: Process
    var url: String
    var stats: String
    var key: P256.Signing.PrivateKey
    var dispatchArguments: [String]
    /// herald-dispatch's FCM settings (with `fcm`): a service account whose token_uri is the double.
    var fcmArguments: [String] = []
    static let project = "bench-project"

    /// A server certificate for 127.0.0.1 signed by a CA of the bench's own (`ca.pem`, which
    /// herald-dispatch is told to trust), and an APNs signing key; in `<dir>/apns`.
    static func certificates(dir: String) throws -> (folder: String, key: P256.Signing.PrivateKey) {
        guard let openssl = which("openssl") else {
            throw BenchError("openssl is missing (scripts/setup.sh --bench installs it)")
        }
        let folder = dir + "/apns"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _ = try runProcess(
            openssl,
            ["req", "-x509"] + ec + [
                "-keyout", "\(folder)/ca.key", "-out", "\(folder)/ca.pem", "-days", "2", "-subj", "/CN=bench-ca",
            ],
            quiet: true)
        _ = try runProcess(
            openssl,
            ["req"] + ec + [
                "-keyout", "\(folder)/double.key", "-out", "\(folder)/double.csr", "-subj", "/CN=apns-double",
            ],
            quiet: true)
        try "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n".write(
            toFile: "\(folder)/double.ext", atomically: true, encoding: .utf8)
        _ = try runProcess(
            openssl,
            [
                "x509", "-req", "-in", "\(folder)/double.csr", "-CA", "\(folder)/ca.pem", "-CAkey", "\(folder)/ca.key",
                "-CAcreateserial",
                "-out", "\(folder)/double.pem", "-days", "2", "-extfile", "\(folder)/double.ext",
            ], quiet: true)
        let key = P256.Signing.PrivateKey()
        try key.pemRepresentation.write(toFile: "\(folder)/apns.p8", atomically: true, encoding: .utf8)
        try key.publicKey.pemRepresentation.write(toFile: "\(folder)/apns.pub.pem", atomically: true, encoding: .utf8)
        return (folder, key)
    }

    /// herald-dispatch's APNs settings for a server at `url` with ``certificates(dir:)``'s files.
    static func apnsArguments(folder: String, url: String) -> [String] {
        [
            "--push-ca-file", "\(folder)/ca.pem", "--apns-key-file", "\(folder)/apns.p8", "--apns-key-id", keyID,
            "--apns-team-id", teamID, "--apns-topic", topic, "--apns-url", url,
        ]
    }

    /// nghttpd on a free loopback port with ``certificates(dir:)``'s server certificate, answering
    /// every POST with 200 (`--echo-upload`).
    static func startNghttpd(dir: String) async throws -> APNsDoubleProcess {
        guard let nghttpd = which("nghttpd") else {
            throw BenchError("nghttpd is missing: apt-get install -y nghttp2-server (scripts/setup.sh --bench does it)")
        }
        let (folder, key) = try certificates(dir: dir)
        let port = try Stack.freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nghttpd)
        process.arguments = [
            "--echo-upload", "--no-content-length", "--address=127.0.0.1", String(port), "\(folder)/double.key",
            "\(folder)/double.pem",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let url = "https://127.0.0.1:\(port)"
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, process.isRunning {
            if Stack.isListening(port) {
                return APNsDoubleProcess(
                    process: process, url: url, stats: "", key: key,
                    dispatchArguments: apnsArguments(folder: folder, url: url))
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        throw BenchError("nghttpd did not start on port \(port)")
    }

    /// `watch`: a device token whose pushes' arrival times the double writes to `<folder>/watched`
    /// (``watched()``).
    static func start(dir: String, fcm: Bool = false, watch: String? = nil) async throws -> APNsDoubleProcess {
        guard let openssl = which("openssl") else {
            throw BenchError("openssl is missing (scripts/setup.sh --bench installs it)")
        }
        let (folder, key) = try certificates(dir: dir)

        let urlFile = "\(folder)/url"
        let stats = "\(folder)/stats"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Stack.defaultBinDirectory() + "/herald-bench")
        process.arguments =
            [
                "apns-double", "--certificate", "\(folder)/double.pem", "--key", "\(folder)/double.key",
                "--jwt-public-key",
                "\(folder)/apns.pub.pem", "--key-id", keyID, "--team-id", teamID, "--topic", topic, "--url-file",
                urlFile, "--stats-file",
                stats,
            ] + (fcm ? ["--fcm-project", project] : [])
            + (watch.map { ["--watch-device", $0, "--watch-file", "\(folder)/watched"] } ?? [])
        try process.run()
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let url = try? String(contentsOfFile: urlFile, encoding: .utf8), !url.isEmpty {
                var fcmArguments: [String] = []
                if fcm {
                    _ = try runProcess(
                        openssl,
                        [
                            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out",
                            "\(folder)/fcm.key",
                        ],
                        quiet: true)
                    let account: [String: Any] = [
                        "type": "service_account", "project_id": project, "private_key_id": "bench-1",
                        "private_key": try String(contentsOfFile: "\(folder)/fcm.key", encoding: .utf8),
                        "client_email": "bench@\(project).iam.gserviceaccount.com", "token_uri": "\(url)/token",
                    ]
                    try jsonData(account).write(
                        to: URL(fileURLWithPath: "\(folder)/service-account.json"))
                    fcmArguments = [
                        "--push-ca-file", "\(folder)/ca.pem", "--fcm-service-account-file",
                        "\(folder)/service-account.json", "--fcm-url",
                        url,
                    ]
                }
                return APNsDoubleProcess(
                    process: process, url: url, stats: stats, key: key,
                    dispatchArguments: apnsArguments(folder: folder, url: url), fcmArguments: fcmArguments)
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        throw BenchError("the APNs double did not start")
    }

    /// When each push to the watched device arrived (Unix ms), by apns-id (lower case); the file
    /// is rewritten every 50 ms, so wait that long after the last push.
    func watched() -> [String: Int64] {
        let file = URL(fileURLWithPath: stats).deletingLastPathComponent().path + "/watched"
        var arrivals: [String: Int64] = [:]
        for line in ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let at = Int64(parts[1]) {
                arrivals[String(parts[0])] = arrivals[String(parts[0])] ?? at
            }
        }
        return arrivals
    }

    /// SIGTERM, then SIGKILL after 2 s: nghttpd inherits the signal mask of the thread that
    /// spawned it, with SIGTERM blocked (see ``PeerSide/django(_:dir:_:)``), so it never sees it.
    func stop() {
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Polls the double's stats until `delivered` requests were answered 200 (or 10 s passed).
    func waitFor(delivered: Int) async throws -> APNsDoubleStats {
        let deadline = ContinuousClock.now + .seconds(10)
        var last = APNsDoubleStats()
        while ContinuousClock.now < deadline {
            if let read = APNsDoubleStats.read(stats) {
                last = read
                if read.delivered + read.refused >= delivered { return read }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return last
    }

    /// A provider token as Herald's sender signs it.
    func jwt() throws -> String {
        func base64URL(_ data: Data) -> String {
            data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let header = base64URL(Data(#"{"alg":"ES256","kid":"\#(Self.keyID)","typ":"JWT"}"#.utf8))
        let claims = base64URL(Data(#"{"iss":"\#(Self.teamID)","iat":\#(unixMillis() / 1000)}"#.utf8))
        let signature = try key.signature(for: Data("\(header).\(claims)".utf8))
        return "\(header).\(claims).\(base64URL(signature.rawRepresentation))"
    }

    struct Alone {
        var requests: Int
        var seconds: Double
        var rate: Double
        var doubleCPUMicros: Double
    }

    /// h2load against the double: `requests` pushes over 4 connections, 100 streams each, one thread.
    func h2load(_ h2load: String, requests: Int, dir: String, platform: Platform = .apns) throws -> Alone {
        let body = dir + "/apns/body.json"
        let arguments: [String]
        if platform == .fcm {
            try #"{"message":{"token":"\#(String(repeating: "ab", count: 32))","notification":{"title":"fan-out"}}}"#
                .write(
                    toFile: body, atomically: true, encoding: .utf8)
            arguments = [
                "-H", "authorization: Bearer \(APNsDoubleRules.fcmAccessToken)", "-H",
                "content-type: application/json; charset=UTF-8",
                "-d", body, "\(url)/v1/projects/\(Self.project)/messages:send",
            ]
        } else {
            try #"{"aps":{"alert":"fan-out"}}"#.write(toFile: body, atomically: true, encoding: .utf8)
            arguments = [
                "-H", "authorization: bearer \(try jwt())", "-H", "apns-topic: \(Self.topic)", "-H",
                "apns-push-type: alert", "-H", "apns-priority: 10", "-H",
                "apns-id: 6c1c7a4e-5b7e-4d4c-9a43-2f3f0c0e1d2b", "-d", body,
                "\(url)/3/device/\(String(repeating: "ab", count: 32))",
            ]
        }
        let before = try RPCScenario.cpuSeconds(pid: process.processIdentifier)
        let output = try runProcess(h2load, ["-n", String(requests), "-c", "4", "-m", "100", "-t", "1"] + arguments)
        let cpu = try RPCScenario.cpuSeconds(pid: process.processIdentifier) - before
        guard let finished = output.firstMatch(of: /finished in ([0-9.]+)(m?s), ([0-9.]+) req\/s/),
            let succeeded = output.firstMatch(of: /(\d+) succeeded/).flatMap({ Int($0.1) }), succeeded == requests,
            let took = Double(finished.1), let rate = Double(finished.3)
        else { throw BenchError("h2load did not complete every request:\n\(output)") }
        return Alone(
            requests: requests, seconds: finished.2 == "ms" ? took / 1000 : took, rate: rate,
            doubleCPUMicros: cpu * 1e6 / Double(requests))
    }
}
