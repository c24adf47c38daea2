import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import NIOCore
import RegistrationService
import Synchronization

/// `herald-bench nh`: Notification Hubs installations through the edge (PUT and PATCH with a SAS
/// token, wrk against the hello-world baseline) and a send to a three-tag expression over 100,000
/// installations (deliveries/s, next to the in-process insert floor).
struct NHBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nh", abstract: "NH installation PUT and PATCH through the edge, and a tag-expression send to 100,000 installations.")
    @OptionGroup var options: BenchOptions

    func run() async throws { try await execute() }

    func execute() async throws {
        try options.show(try await NHScenario(options: options).run(), scenarios: ["nh"])
    }
}

struct NHScenario {
    var options: BenchOptions
    /// The expression sent to: "all" is on every installation, "even" and "odd" split them, so every
    /// installation matches and the audience is driven by "all"'s index entries.
    static let expression = "all && (even || odd)"

    func run() async throws -> Report {
        guard let wrk = which("wrk") else { throw BenchError("wrk is missing: apt-get install -y wrk (scripts/setup.sh --bench does it)") }
        let count = options.fanoutSize
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let edge = EdgeScenario(options: options)

        let hello = try await HelloServer.start(dir: dir)
        let helloRun = try edge.runWrk(wrk, url: hello.url + "/hello", script: nil, dir: dir)
        hello.process.terminate()
        hello.process.waitUntilExit()

        let configuration = StackConfiguration.bench(dir: dir)
        try seedInstallations(count, hub: "bench", path: configuration.dataDirectory + "/registration.sqlite")
        let floor = try FanoutScenario(options: options).baselineInserts(count, path: dir + "/baseline.sqlite")
        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            let base = await stack.edgeURL
            let secret = try await RPCClient.with(socketPath: configuration.socketPath("auth")) { client in
                let auth = AuthServiceClient(client)
                _ = try await auth.createHub(CreateHubRequest(name: "bench"))
                return try await auth.listHubKeys(ListHubKeysRequest(hub: "bench")).keys.first {
                    $0.name == "DefaultFullSharedAccessSignature"
                }!
                .primaryKey
            }
            let authorization = Self.token(audience: base + "/", keyName: "DefaultFullSharedAccessSignature", key: secret)
            let channel = String(repeating: "ab", count: 32)
            // PUT: a new installation per request (wrk's counter in the id), as devices registering.
            let putScript = dir + "/put.lua"
            try """
            counter = 0
            request = function()
              counter = counter + 1
              local id = "w" .. tostring(math.random(1, 1000000000)) .. "-" .. counter
              local body = '{"installationId":"' .. id .. '","platform":"apns","pushChannel":"\(channel)","tags":["news","sports"],"userId":"bench"}'
              return wrk.format("PUT", "/bench/installations/" .. id .. "?api-version=2020-06",
                {["Content-Type"] = "application/json", ["Authorization"] = "\(authorization)"}, body)
            end

            """.write(toFile: putScript, atomically: true, encoding: .utf8)
            let patchScript = dir + "/patch.lua"
            try """
            wrk.method = "PATCH"
            wrk.body = '[{"op":"replace","path":"/tags","value":["all","odd","weather"]}]'
            wrk.headers["Content-Type"] = "application/json-patch+json"
            wrk.headers["Authorization"] = "\(authorization)"

            """.write(toFile: patchScript, atomically: true, encoding: .utf8)
            let put = try edge.runWrk(wrk, url: base + "/bench/installations/x", script: putScript, dir: dir)
            let patch = try edge.runWrk(
                wrk, url: base + "/bench/installations/i00000001?api-version=2020-06", script: patchScript, dir: dir)

            // The send: through the edge like a back end would, clocked until the outcome is final.
            let started = ContinuousClock.now
            let id = try await Self.send(base: base, authorization: authorization)
            let outcome = try await RPCClient.with(socketPath: configuration.socketPath("dispatch"), timeout: .seconds(3600)) { client in
                var outcome = try await DispatchServiceClient(client).getOutcome(GetOutcomeRequest(notificationID: id))
                while outcome.state == .enqueued || outcome.state == .processing {
                    try await Task.sleep(for: .milliseconds(20))
                    outcome = try await DispatchServiceClient(client).getOutcome(GetOutcomeRequest(notificationID: id))
                }
                return outcome
            }
            let seconds = (ContinuousClock.now - started).seconds
            let delivered = outcome.platforms.reduce(0) { $0 + $1.success }
            // The PUTs' new installations carry no "all", and the PATCH keeps i00000001's: exactly the seeded ones match.
            guard delivered == count else { throw BenchError("the expression send delivered \(delivered) of \(count)") }
            await stack.stop()

            var report = Report()
            let helloName = "Hummingbird hello world"
            for (name, run) in [("PUT /{hub}/installations/{id}", put), ("PATCH /{hub}/installations/{id}", patch)] {
                report.records.append(
                    Record(
                        "nh", "\(name): requests/s", unit: "req/s", value: run.requestsPerSecond, baseline: helloName,
                        baselineValue: helloRun.requestsPerSecond, better: "higher"))
                report.records.append(
                    Record(
                        "nh", "\(name): p99 latency", unit: "ms", value: run.p99Millis, baseline: helloName,
                        baselineValue: helloRun.p99Millis, better: "lower"))
            }
            let rate = Double(count) / seconds
            report.records.append(
                Record(
                    "nh", "send to \"\(Self.expression)\" over \(count) installations: deliveries/s", unit: "/s", value: rate,
                    baseline: "inbox rows inserted in-process", baselineValue: floor, better: "higher"))
            var lines = [
                "## nh: Notification Hubs installations through the edge, wrk -c\(edge.connections), \(options.wrkSeconds) s per route (SAS token, Full key)",
                "",
                "| route | requests/s | p50 ms | p99 ms | % of hello world |",
                "|---|---:|---:|---:|---:|",
            ]
            for (name, run) in [
                ("hello world (baseline)", helloRun), ("PUT /{hub}/installations/{id} (new ids)", put),
                ("PATCH /{hub}/installations/{id}", patch),
            ] {
                lines.append(
                    "| \(name) | \(format(run.requestsPerSecond)) | \(format(run.p50Millis)) | \(format(run.p99Millis)) | \(String(format: "%.0f%%", 100 * run.requestsPerSecond / helloRun.requestsPerSecond)) |"
                )
            }
            lines += [
                "",
                "| send through POST /{hub}/messages, inbox provider | deliveries | seconds | deliveries/s |",
                "|---|---:|---:|---:|",
                "| `\(Self.expression)` over \(count) installations (of \(count) + the PUTs' in the hub) | \(count) | \(String(format: "%.2f", seconds)) | \(format(rate)) |",
                "| baseline: the same rows inserted in-process | \(count) | \(String(format: "%.2f", Double(count) / floor)) | \(format(floor)) |",
            ]
            report.tables = [lines.joined(separator: "\n")]
            return report
        } catch {
            await stack.stop()
            throw error
        }
    }

    /// A SharedAccessSignature as the JS SDK signs it: the namespace root, upper-case escapes, an hour.
    static func token(audience: String, keyName: String, key: String) -> String {
        let sr = audience.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? audience
        let expiry = Int(Date().timeIntervalSince1970) + 3600
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(sr)\n\(expiry)".utf8), using: SymmetricKey(data: Data(key.utf8)))
        let sig = Data(mac).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return "SharedAccessSignature sr=\(sr)&sig=\(sig)&se=\(expiry)&skn=\(keyName)"
    }

    /// `POST /{hub}/messages` to ``expression``; the notification id from `Location`.
    static func send(base: String, authorization: String) async throws -> String {
        var request = HTTPClientRequest(url: base + "/bench/messages?api-version=2020-06")
        request.method = .POST
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "ServiceBusNotification-Format", value: "apple")
        request.headers.add(name: "ServiceBusNotification-Tags", value: expression)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: #"{"aps":{"alert":"expression"}}"#))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(3600))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 201, let location = response.headers.first(name: "Location"),
            let id = location.split(separator: "/").last?.split(separator: "?").first
        else { throw BenchError("the expression send was not accepted: \(response.status) \(String(buffer: body))") }
        return String(id)
    }

    /// `count` APNs installations in `hub`, tagged "all" and "even" or "odd", written with
    /// herald-registration's own schema (and NH JSON) before the stack starts.
    func seedInstallations(_ count: Int, hub: String, path: String) throws {
        try makePrivateDirectory(URL(fileURLWithPath: path).deletingLastPathComponent().path)
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.configuration)
        _ = try RegistrationStore(db: pool)
        let now = unixMillis()
        try pool.write { db in
            let registration = try db.makeStatement(
                sql: """
                    INSERT INTO registration (id, owner, platform, handle, created_at, updated_at, hub, installation_id, document)
                    VALUES (?, '', ?, ?, ?, ?, ?, ?, ?)
                    """)
            let tag = try db.makeStatement(sql: "INSERT INTO registration_tag (tag, registration_id) VALUES (?, ?)")
            for index in 0..<count {
                let id = String(format: "i-bench-%08d", index)
                var installation = Installation(
                    installationID: String(format: "i%08d", index), platform: .apns, pushChannel: String(format: "%064x", index),
                    tags: ["all", index % 2 == 0 ? "even" : "odd"])
                installation.lastUpdate = now
                try registration.execute(arguments: [
                    id, Platform.apns.rawValue, installation.pushChannel, now, now, hub, installation.installationID,
                    Data(try installation.json()),
                ])
                for name in installation.audienceTags { try tag.execute(arguments: [name, id]) }
            }
        }
        try pool.close()
    }
}
