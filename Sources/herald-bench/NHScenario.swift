import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldStack
import NIOCore
import NotificationHubs
import RegistrationService
import Synchronization

/// `herald-bench nh`: Notification Hubs installations through the edge (PUT and PATCH with a SAS
/// token, wrk against the hello-world baseline), a send to a three-tag expression over 100,000
/// installations (deliveries/s, next to the in-process insert floor), a template send to the same
/// installations in four locales (one template each), and direct batch sends of 1,000 handles.
struct NHBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nh",
        abstract:
            "NH installation PUT and PATCH, registration PUT and query through the edge; native, template and batch sends to 100,000 installations."
    )
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
        guard let wrk = which("wrk") else {
            throw BenchError("wrk is missing: apt-get install -y wrk (scripts/setup.sh --bench does it)")
        }
        let count = options.fanoutSize
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let edge = EdgeScenario(options: options)

        let hello = try await HelloServer.start(dir: dir)
        let helloRun = try edge.runWrk(wrk, url: hello.url + "/hello", script: nil, dir: dir)
        hello.process.terminate()
        hello.process.waitUntilExit()

        let configuration = StackConfiguration.bench(dir: dir)
        // The hub first: registration keeps devices under the hub's id, which auth gives it when it
        // is made; the installations are then seeded under that id, with the stack stopped.
        let setup = Stack(configuration: configuration)
        try await setup.start()
        let hubID: String
        do {
            hubID = try await RPCClient.with(socketPath: configuration.socketPath("auth")) { client in
                try await AuthServiceClient(client).createHub(CreateHubRequest(name: "bench")).id
            }
            await setup.stop()
        } catch {
            await setup.stop()
            throw error
        }
        try seedInstallations(count, hub: hubID, path: configuration.dataDirectory + "/registration.sqlite")
        let floor = try FanoutScenario(options: options).baselineInserts(count, path: dir + "/baseline.sqlite")
        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            let base = await stack.edgeURL
            let secret = try await RPCClient.with(socketPath: configuration.socketPath("auth")) { client in
                let auth = AuthServiceClient(client)
                guard
                    let key = try await auth.listHubKeys(ListHubKeysRequest(hub: "bench")).keys.first(where: {
                        $0.name == "DefaultFullSharedAccessSignature"
                    })
                else { throw BenchError("hub bench has no DefaultFullSharedAccessSignature key") }
                return key.primaryKey
            }
            let authorization = Self.token(
                audience: base + "/", keyName: "DefaultFullSharedAccessSignature", key: secret)
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
            // NH registrations: a PUT of a new one per request (the .NET SDK's body), and the query the
            // tutorial's AppBackend makes before each registration (one handle's, $top=100).
            let registrationScript = dir + "/registration.lua"
            try """
            counter = 0
            request = function()
              counter = counter + 1
              local id = "r" .. tostring(math.random(1, 1000000000)) .. "-" .. counter
              local body = '\(Self.registrationBody(handle: channel))'
              return wrk.format("PUT", "/bench/registrations/" .. id .. "?api-version=2017-04",
                {["Content-Type"] = "application/atom+xml;type=entry;charset=utf-8", ["Authorization"] = "\(authorization)"}, body)
            end

            """.write(toFile: registrationScript, atomically: true, encoding: .utf8)
            let registrationPut = try edge.runWrk(
                wrk, url: base + "/bench/registrations/x", script: registrationScript, dir: dir)
            let queried = String(repeating: "cd", count: 32)
            try await Self.putRegistration(
                base: base, authorization: authorization, id: "query-target", handle: queried)
            let queryScript = dir + "/query.lua"
            try """
            wrk.headers["Authorization"] = "\(authorization)"

            """.write(toFile: queryScript, atomically: true, encoding: .utf8)
            let registrationQuery = try edge.runWrk(
                wrk,
                url: base + "/bench/registrations?api-version=2017-04&$filter=ChannelUri+eq+%27\(queried)%27&$top=100",
                script: queryScript, dir: dir)

            // The sends: through the edge like a back end would, each clocked until its outcome is
            // final and until 201 (the audience read, the outbox committed), with the CPU seconds
            // herald-dispatch and herald-registration spent on it.
            func processCounters() async throws -> (dispatch: Double, registration: Double, written: Double) {
                guard let dispatch = await stack.pid(of: "dispatch"),
                    let registration = await stack.pid(of: "registration")
                else { throw BenchError("a service is not running") }
                return (
                    try RPCScenario.cpuSeconds(pid: dispatch), try RPCScenario.cpuSeconds(pid: registration),
                    try Self.bytesWritten(pid: dispatch)
                )
            }
            func timed(_ format: String, tags: String, body: String) async throws -> SendTiming {
                // Each send starts from an empty inbox: the inbox's (handle, sequence) index takes
                // each push at a random place, so its cost grows with what earlier sends left
                // there, and the second send measured would pay for the first.
                let inbox = try DatabaseQueue(
                    path: configuration.dataDirectory + "/dispatch.sqlite", configuration: HeraldDatabase.configuration)
                try await inbox.write { try $0.execute(sql: "DELETE FROM inbox") }
                try inbox.close()
                let before = try await processCounters()
                let started = ContinuousClock.now
                let id = try await Self.send(
                    base: base, authorization: authorization, format: format, tags: tags, body: body)
                let accepted = (ContinuousClock.now - started).seconds
                let outcome = try await Self.finalOutcome(id, socket: configuration.socketPath("dispatch"))
                let delivered = outcome.platforms.reduce(0) { $0 + $1.success }
                // The PUTs' new installations carry no "all", and the PATCH keeps i00000001's: exactly the seeded ones match.
                guard delivered == count else {
                    throw BenchError("the \(format) send delivered \(delivered) of \(count)")
                }
                let elapsed = (ContinuousClock.now - started).seconds
                let after = try await processCounters()
                return SendTiming(
                    seconds: elapsed, accepted: accepted, dispatchCPU: after.dispatch - before.dispatch,
                    registrationCPU: after.registration - before.registration,
                    dispatchWrittenMB: (after.written - before.written) / 1e6)
            }
            let native = try await timed("apple", tags: Self.expression, body: #"{"aps":{"alert":"expression"}}"#)
            let seconds = native.seconds
            let template = try await timed(
                "template", tags: "all", body: #"{"title":"Storm warning","title_fr":"Alerte tempête","count":"3"}"#)
            // Direct batches of 1,000 handles: the request until 201 (committed), and one batch until delivered.
            let batches = options.quick ? 5 : 20
            var accepted: [Double] = []
            var lastBatch = ""
            for batch in 0..<batches {
                let handles = (0..<1000).map { String(format: "%064x", 1_000_000 + batch * 1000 + $0) }
                let started = ContinuousClock.now
                lastBatch = try await Self.sendBatch(base: base, authorization: authorization, handles: handles)
                accepted.append((ContinuousClock.now - started).seconds * 1000)
            }
            let batchStarted = ContinuousClock.now
            let batchOutcome = try await Self.finalOutcome(lastBatch, socket: configuration.socketPath("dispatch"))
            let batchDelivered = (ContinuousClock.now - batchStarted).seconds * 1000
            guard batchOutcome.platforms.reduce(0, { $0 + $1.success }) == 1000 else {
                throw BenchError("a batch delivered \(batchOutcome.platforms.reduce(0) { $0 + $1.success }) of 1000")
            }
            accepted.sort()
            await stack.stop()

            var report = Report()
            let helloName = "Hummingbird hello world"
            for (name, run) in [
                ("PUT /{hub}/installations/{id}", put), ("PATCH /{hub}/installations/{id}", patch),
                ("PUT /{hub}/registrations/{id}", registrationPut),
                ("GET /{hub}/registrations?$filter=ChannelUri eq", registrationQuery),
            ] {
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
            let templateRate = Double(count) / template.seconds
            report.records.append(
                Record(
                    "nh", "send to \"\(Self.expression)\" over \(count) installations: deliveries/s", unit: "/s",
                    value: rate,
                    baseline: "inbox rows inserted in-process", baselineValue: floor, better: "higher"))
            report.records.append(
                Record(
                    "nh", "template send, 4 locales, over \(count) installations: deliveries/s", unit: "/s",
                    value: templateRate,
                    baseline: "the native send", baselineValue: rate, better: "higher"))
            report.records.append(
                Record(
                    "nh", "direct batch of 1,000 handles: ms until 201 (median)", unit: "ms",
                    value: accepted[accepted.count / 2],
                    baseline: "the expression send, ms per 1,000 deliveries",
                    baselineValue: seconds / Double(count) * 1_000_000,
                    better: "lower"))
            var lines = [
                "## nh: Notification Hubs installations through the edge, wrk -c\(edge.connections), \(options.wrkSeconds) s per route (SAS token, Full key)",
                "",
                "| route | requests/s | p50 ms | p99 ms | % of hello world |",
                "|---|---:|---:|---:|---:|",
            ]
            for (name, run) in [
                ("hello world (baseline)", helloRun), ("PUT /{hub}/installations/{id} (new ids)", put),
                ("PATCH /{hub}/installations/{id}", patch),
                ("PUT /{hub}/registrations/{id} (new ids, Atom body)", registrationPut),
                ("GET /{hub}/registrations?$filter=ChannelUri eq '…' (one handle's)", registrationQuery),
            ] {
                lines.append(
                    "| \(name) | \(format(run.requestsPerSecond)) | \(format(run.p50Millis)) | \(format(run.p99Millis)) | \(String(format: "%.0f%%", 100 * run.requestsPerSecond / helloRun.requestsPerSecond)) |"
                )
            }
            lines += [
                "",
                "| send through POST /{hub}/messages, inbox provider | deliveries | seconds | deliveries/s | of which until 201 (audience read, outbox committed), s | CPU s: dispatch, registration | MB dispatch wrote |",
                "|---|---:|---:|---:|---:|---:|---:|",
                "| `\(Self.expression)` over \(count) installations (of \(count) + the PUTs' in the hub) | \(count) | \(native.row(rate: rate)) |",
                "| template send to `all`, one of 4 locale templates per installation (4 renderings) | \(count) | \(template.row(rate: templateRate)) |",
                "| baseline: the same rows inserted in-process | \(count) | \(String(format: "%.2f", Double(count) / floor)) | \(format(floor)) | | | |",
                "",
                "| direct batch send, POST /{hub}/messages/$batch?direct, 1,000 APNs handles | ms |",
                "|---|---:|",
                "| until 201 (committed), median of \(batches) | \(String(format: "%.1f", accepted[accepted.count / 2])) |",
                "| until 201, slowest of \(batches) | \(String(format: "%.1f", accepted.last ?? 0)) |",
                "| one batch from 201 until every push delivered (inbox) | \(String(format: "%.1f", batchDelivered)) |",
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
        let mac = HMAC<SHA256>.authenticationCode(
            for: Data("\(sr)\n\(expiry)".utf8), using: SymmetricKey(data: Data(key.utf8)))
        let sig = Data(mac).base64EncodedString().addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return "SharedAccessSignature sr=\(sr)&sig=\(sig)&se=\(expiry)&skn=\(keyName)"
    }

    /// An Apple registration as the .NET SDK's serializer writes it (no quotes of its own: it goes
    /// into a Lua string).
    static func registrationBody(handle: String) -> String {
        #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleRegistrationDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><RegistrationId i:nil="true"/><Tags>bench-registration</Tags><DeviceToken>\#(handle)</DeviceToken></AppleRegistrationDescription></content></entry>"#
    }

    /// `PUT /{hub}/registrations/{id}` of one Apple registration; 200 expected.
    static func putRegistration(base: String, authorization: String, id: String, handle: String) async throws {
        var request = HTTPClientRequest(url: base + "/bench/registrations/\(id)?api-version=2017-04")
        request.method = .PUT
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "Content-Type", value: "application/atom+xml;type=entry;charset=utf-8")
        request.body = .bytes(ByteBuffer(string: registrationBody(handle: handle)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 200 else {
            throw BenchError("the registration PUT failed: \(response.status) \(String(buffer: body))")
        }
    }

    /// `POST /{hub}/messages` in `format` to `tags`; the notification id from `Location`.
    static func send(base: String, authorization: String, format: String, tags: String, body: String) async throws
        -> String
    {
        var request = HTTPClientRequest(url: base + "/bench/messages?api-version=2020-06")
        request.method = .POST
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "ServiceBusNotification-Format", value: format)
        request.headers.add(name: "ServiceBusNotification-Tags", value: tags)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: body))
        return try await accepted(request)
    }

    /// `POST /{hub}/messages/$batch?direct` of one APNs alert to `handles`, as the .NET SDK sends it.
    static func sendBatch(base: String, authorization: String, handles: [String]) async throws -> String {
        var request = HTTPClientRequest(url: base + "/bench/messages/$batch?direct&api-version=2020-06")
        request.method = .POST
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "ServiceBusNotification-Format", value: "apple")
        request.headers.add(name: "Content-Type", value: #"multipart/mixed; boundary="nh-batch-multipart-boundary""#)
        let devices = "[" + handles.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        let body = [
            "--nh-batch-multipart-boundary", "Content-Type: application/json",
            "Content-Disposition: inline; name=notification", "",
            #"{"aps":{"alert":"batch"}}"#, "--nh-batch-multipart-boundary", "Content-Type: application/json",
            "Content-Disposition: inline; name=devices", "", devices, "--nh-batch-multipart-boundary--", "",
        ].joined(separator: "\r\n")
        request.body = .bytes(ByteBuffer(string: body))
        return try await accepted(request)
    }

    static func accepted(_ request: HTTPClientRequest) async throws -> String {
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(3600))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 201, let location = response.headers.first(name: "Location"),
            let id = location.split(separator: "/").last?.split(separator: "?").first
        else { throw BenchError("the send was not accepted: \(response.status) \(String(buffer: body))") }
        return String(id)
    }

    /// Polls herald-dispatch until the send is final.
    static func finalOutcome(_ id: String, socket: String) async throws -> Outcome {
        try await RPCClient.with(socketPath: socket, timeout: .seconds(3600)) { client in
            var outcome = try await DispatchServiceClient(client).getOutcome(
                GetOutcomeRequest(notificationID: id, scope: .all))
            while outcome.state == .enqueued || outcome.state == .processing {
                try await Task.sleep(for: .milliseconds(20))
                outcome = try await DispatchServiceClient(client).getOutcome(
                    GetOutcomeRequest(notificationID: id, scope: .all))
            }
            return outcome
        }
    }

    /// Installation `index`'s APNs token: 64 hex digits that look random, as real tokens do.
    ///
    /// Why not `%064x` of the index: the native send's audience comes in installation-id order,
    /// so sequential tokens reached the inbox's `(handle, sequence)` index in key order (appends),
    /// while the template send's rows (random `t-…` ids) reached it in random order, and that
    /// index's page writes (about 1.2 GB per 100,000 pushes, against 0.3 GB) were the whole
    /// difference between the two sends. Real tokens bear no relation to the ids, for either send.
    static func token(_ index: Int) -> String {
        var state = UInt64(index) &* 0x9E37_79B9_7F4A_7C15
        var out = ""
        for _ in 0..<4 {
            // splitmix64: a bijection, so the tokens stay distinct.
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            out += String(format: "%016llx", z ^ (z >> 31))
        }
        return out
    }

    /// Bytes `pid` has caused to be written to storage (`write_bytes` of `/proc/<pid>/io`).
    static func bytesWritten(pid: Int32) throws -> Double {
        guard let bytes = try procFields(pid, "io")["write_bytes"] else {
            throw BenchError("no write_bytes for \(pid)")
        }
        return bytes
    }

    /// The four locale templates; installation n has template n % 4, tagged with its locale.
    static let locales: [(name: String, template: Installation.Template)] = [
        ("news_en", "{'Breaking: ' + $(title)}"), ("news_fr", "{'Dernière : ' + $(title_fr:{Nouvelles})}"),
        ("news_de", "{'Eilmeldung: ' + $(title_de:{Nachrichten})}"),
        ("news_es", "{'Última hora: ' + $(title_es:{Noticias})}"),
    ].map { name, alert in
        (
            name,
            Installation.Template(
                body: ##"{"aps":{"alert":"\##(alert)","badge":"#(count)"}}"##, headers: ["apns-priority": "10"],
                expiry: nil,
                tags: ["lang_" + name.suffix(2), name])
        )
    }

    /// `count` APNs installations in `hub`, tagged "all" and "even" or "odd", each with one of
    /// four locale templates, written with herald-registration's own schema (and NH JSON) before
    /// the stack starts.
    func seedInstallations(_ count: Int, hub: String, path: String) throws {
        try makePrivateDirectory(URL(fileURLWithPath: path).deletingLastPathComponent().path)
        let pool = try DatabasePool(path: path, configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: RegistrationSchema.schema).migrate(pool)
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
                    installationID: String(format: "i%08d", index), platform: .apns,
                    pushChannel: Self.token(index),
                    tags: ["all", index % 2 == 0 ? "even" : "odd"])
                let locale = Self.locales[index % 4]
                installation.templates = [locale.name: locale.template]
                installation.lastUpdate = now
                try registration.execute(arguments: [
                    id, Platform.apns.rawValue, installation.pushChannel, now, now, hub, installation.installationID,
                    Data(try installation.json()),
                ])
                for name in installation.audienceTags { try tag.execute(arguments: [name, id]) }
                for statement in InstallationRows.templates(
                    of: installation, parentID: id, hub: hub, expired: false, now: now)
                {
                    try SQLiteDatabase.execute(db, statement)
                }
            }
        }
        try pool.close()
    }
}

/// One send of the nh scenario: seconds until its outcome was final and until 201, and the CPU
/// seconds herald-dispatch and herald-registration spent meanwhile.
struct SendTiming {
    var seconds: Double
    var accepted: Double
    var dispatchCPU: Double
    var registrationCPU: Double
    /// What herald-dispatch wrote to storage meanwhile (`/proc/<pid>/io` write_bytes), MB.
    var dispatchWrittenMB: Double

    /// The table's cells after the deliveries column.
    func row(rate: Double) -> String {
        String(format: "%.2f | ", seconds) + format(rate)
            + String(format: " | %.2f | %.2f, %.2f | %.0f", accepted, dispatchCPU, registrationCPU, dispatchWrittenMB)
    }
}
