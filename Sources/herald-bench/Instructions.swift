import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `herald-bench instructions`: instructions per request, counted by valgrind's callgrind in the
/// serving processes. Unlike requests/s, a count does not move with the machine's noise: the same
/// binary and inputs give the same figure within a fraction of a percent, so a regression shows as
/// a number in CI's quick run.
///
/// The processes run under callgrind from their start; after a warm-up, `callgrind_control -z`
/// zeroes their counters, the calls are made one at a time, and `callgrind_control -d` dumps what
/// they cost. Counted: an edge `GET api/notifications/{id}` in herald-edge, herald-auth and
/// herald-payload (the whole server side of the request), an edge `PUT api/register/{id}` in
/// herald-edge, herald-auth and herald-registration, an NH `PUT /{hub}/installations/{id}` in the
/// same three, and a lean `FetchPayload` in herald-payload; next to a Hummingbird hello-world GET
/// and a lean echo RPC (`herald-bench serve`), counted the same way. Then a template send's CPU
/// steps in herald-dispatch next to a native send's (``TemplateCounts``).
struct InstructionsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "instructions",
        abstract:
            "Instructions per edge GET, edge PUT, NH installation PUT, FetchPayload and template render (callgrind).")
    @OptionGroup var options: BenchOptions
    @Flag(
        help: """
            Simulate the caches too (callgrind --cache-sim=yes) and print the misses per request of \
            the tutorial GET and PUT, with tracing off and on: what time per instruction depends on, \
            on a machine without hardware counters. Slower.
            """)
    var cacheSim = false

    func run() async throws { try await execute() }

    func execute() async throws {
        try options.show(
            try await InstructionsScenario(options: options, cacheSim: cacheSim).run(), scenarios: ["instructions"])
    }
}

struct InstructionsScenario {
    var options: BenchOptions
    var cacheSim = false

    var calls: Int { options.quick ? 50 : 400 }
    var warmUp: Int { options.quick ? 20 : 30 }

    func run() async throws -> Report {
        guard let valgrind = which("valgrind"), let control = which("callgrind_control") else {
            throw BenchError("valgrind is missing: apt-get install -y valgrind (scripts/setup.sh --bench does it)")
        }
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var counter = try Callgrind(valgrind: valgrind, control: control, dir: dir)
        counter.cacheSim = cacheSim
        let bin = try counter.strippedCopies()

        // Baselines: the same library's hello world, and the lean protocol's echo.
        let hello = try await counter.counted("hello") { launcher in
            try await HelloServer.start(dir: dir, launcher: launcher, binDirectory: bin, timeout: .seconds(120))
        }
        defer { hello.process.terminate() }
        for _ in 0..<warmUp { try await Self.get(hello.url + "/hello", authorization: nil) }
        let helloGET = try await counter.measure([hello.process.processIdentifier], calls: calls) {
            try await Self.get(hello.url + "/hello", authorization: nil)
        }
        hello.process.terminate()

        let echoServer = try await counter.counted("serve") { launcher in
            try await ServeBench.start(dir: dir, launcher: launcher, binDirectory: bin)
        }
        defer { echoServer.terminate() }
        let echo = try await RPCClient.with(socketPath: "\(dir)/bench.sock", timeout: .seconds(60)) { client in
            let auth = AuthServiceClient(client)
            for _ in 0..<warmUp { _ = try await auth.authenticate(benchRequest) }
            return try await counter.measure([echoServer.processIdentifier], calls: calls) {
                _ = try await auth.authenticate(benchRequest)
            }
        }
        echoServer.terminate()

        var configuration = StackConfiguration.bench(dir: dir)
        configuration.binDirectory = bin
        configuration.startTimeout = .seconds(300)
        let counted = ["auth", "payload", "edge", "registration"]
        for service in counted { configuration.launchers[service] = counter.launcher(service) }
        let stack = Stack(configuration: configuration)
        try await stack.start()
        let get: [Double]
        let put: [Double]
        let nhPut: [Double]
        let fetch: Double
        do {
            let pids = try await Self.pids(of: counted, in: stack)
            let tutorial = try await tutorialCounts(
                stack, configuration, pids: pids, counter: counter, label: "tracing off")
            (get, put) = (tutorial.get, tutorial.put)
            let payloadID = tutorial.payloadID
            let handle = String(repeating: "ab", count: 32)
            // NH PUT /{hub}/installations/{id} as `herald-bench nh`'s wrk run sends it: a new
            // installation per request, signed with the hub's full-access key (edge, auth, registration).
            try await RPCClient.with(socketPath: configuration.socketPath("auth")) { client in
                _ = try await AuthServiceClient(client).createHub(CreateHubRequest(name: "bench"))
            }
            let secret = try await RPCClient.with(socketPath: configuration.socketPath("auth")) { client in
                try await AuthServiceClient(client).listHubKeys(ListHubKeysRequest(hub: "bench")).keys.first {
                    $0.name == "DefaultFullSharedAccessSignature"
                }?.primaryKey
            }
            guard let secret else { throw BenchError("the bench hub has no DefaultFullSharedAccessSignature key") }
            let base = await stack.edgeURL
            let sas = NHScenario.token(audience: base + "/", keyName: "DefaultFullSharedAccessSignature", key: secret)
            var installations = 0
            func putInstallation() async throws {
                installations += 1
                let id = "bench-\(installations)"
                let body =
                    #"{"installationId":"\#(id)","platform":"apns","pushChannel":"\#(handle)","tags":["news","sports"],"userId":"bench"}"#
                try await Self.put(
                    base + "/bench/installations/\(id)?api-version=2020-06", body: body, authorization: sas)
            }
            for _ in 0..<warmUp { try await putInstallation() }
            nhPut = try await counter.measureEach([pids[2], pids[0], pids[3]], calls: calls) {
                try await putInstallation()
            }
            fetch = try await RPCClient.with(socketPath: configuration.leanSocketPath("payload"), timeout: .seconds(60))
            { client in
                let payload = PayloadServiceClient(client)
                let request = FetchPayloadRequest(id: payloadID, requester: "bench")
                for _ in 0..<warmUp { _ = try await payload.fetchPayload(request) }
                return try await counter.measure([pids[1]], calls: calls) {
                    _ = try await payload.fetchPayload(request)
                }
            }
            await stack.stop()
        } catch {
            await stack.stop()
            throw error
        }

        // The same two requests with tracing on, exporting to a collector in this process: no trace
        // sampled (`parentbased_traceidratio` at 0), what tracing costs the 99% of requests a 1%
        // sampler leaves out, and every trace sampled and exported. Requests/s cannot
        // show a few percent on a shared machine; instructions can. Not in the quick run: two more
        // stacks under callgrind.
        func traced(ratio: String) async throws -> (get: [Double], put: [Double]) {
            try await OTLPSink.serving { sink, port in
                var traced = StackConfiguration.bench(dir: dir + "/traced-\(ratio)")
                traced.binDirectory = bin
                traced.startTimeout = .seconds(300)
                // Batches sent when full (512 spans, the default): under callgrind a request takes
                // ~50× as long, and the default 5 s schedule would send a few dozen spans per batch
                // where the same stack at full speed sends full batches. What an export costs per
                // span depends on its batch's size (grpc-swift's generic frames, HPACK, the stream).
                traced.environment = [
                    "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)",
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": ratio,
                    "OTEL_BSP_SCHEDULE_DELAY": "600000",
                ]
                for service in counted { traced.launchers[service] = counter.launcher(service) }
                let stack = Stack(configuration: traced)
                try await stack.start()
                do {
                    let pids = try await Self.pids(of: counted, in: stack)
                    // The warm-up goes on until batches have come from the edge and the service
                    // behind it, so the exporter's one-time set-up (its connection, HPACK's tables,
                    // the runtime's first conformance look-ups) is not counted as the requests' cost.
                    let settle: @Sendable (() async throws -> Void) async throws -> Void = { request in
                        guard ratio != "0" else { return }
                        let before = sink.exports.load(ordering: .relaxed)
                        for _ in 0..<1500 where sink.exports.load(ordering: .relaxed) < before + 3 {
                            try await request()
                        }
                    }
                    let counts = try await tutorialCounts(
                        stack, traced, pids: pids, counter: counter,
                        label: ratio == "0" ? "tracing on, no trace sampled" : "tracing on, every trace sampled",
                        settle: settle)
                    await stack.stop()
                    return (counts.get, counts.put)
                } catch {
                    await stack.stop()
                    throw error
                }
            }
        }
        // The same GET and FetchPayload with herald-payload storing content as it is (its
        // `encryption-keys` off; the last setting given wins): what sealing content at rest costs
        // a read. Not in the quick run: one more stack under callgrind.
        func unsealed() async throws -> (get: [Double], fetch: Double) {
            var plain = StackConfiguration.bench(dir: dir + "/unsealed")
            plain.binDirectory = bin
            plain.startTimeout = .seconds(300)
            plain.extraArguments["payload", default: []] += ["--encryption-keys", "off"]
            for service in counted { plain.launchers[service] = counter.launcher(service) }
            let stack = Stack(configuration: plain)
            try await stack.start()
            do {
                let pids = try await Self.pids(of: counted, in: stack)
                let counts = try await tutorialCounts(
                    stack, plain, pids: pids, counter: counter, label: "content unsealed")
                let fetch = try await RPCClient.with(socketPath: plain.leanSocketPath("payload"), timeout: .seconds(60))
                { client in
                    let payload = PayloadServiceClient(client)
                    let request = FetchPayloadRequest(id: counts.payloadID, requester: "bench")
                    for _ in 0..<warmUp { _ = try await payload.fetchPayload(request) }
                    return try await counter.measure([pids[1]], calls: calls) {
                        _ = try await payload.fetchPayload(request)
                    }
                }
                await stack.stop()
                return (counts.get, fetch)
            } catch {
                await stack.stop()
                throw error
            }
        }
        var unsampled: (get: [Double], put: [Double])?
        var sampled: (get: [Double], put: [Double])?
        var plain: (get: [Double], fetch: Double)?
        if !options.quick {
            unsampled = try await traced(ratio: "0")
            sampled = try await traced(ratio: "1")
            plain = try await unsealed()
        }

        let templates = try TemplateCounts(counter: counter, bin: bin, quick: options.quick)

        let getTotal = get.reduce(0, +)
        let nhPutTotal = nhPut.reduce(0, +)
        let putTotal = put.reduce(0, +)
        var report = Report()
        func record(_ figure: String, _ value: Double, against baseline: (name: String, value: Double)) {
            report.records.append(
                Record(
                    "instructions", figure, unit: "instr", value: value, baseline: baseline.name,
                    baselineValue: baseline.value,
                    better: "lower"))
        }
        let helloWorld = (name: "Hummingbird hello world GET", value: helloGET)
        record("edge GET api/notifications/{id}: instructions (edge + auth + payload)", getTotal, against: helloWorld)
        record("edge GET api/notifications/{id}: instructions in herald-edge", get[0], against: helloWorld)
        record("edge PUT api/register/{id}: instructions (edge + auth + registration)", putTotal, against: helloWorld)
        record("edge PUT api/register/{id}: instructions in herald-edge", put[0], against: helloWorld)
        let tracedRuns = [
            ("not sampled", "no trace sampled", unsampled),
            ("every trace sampled", "every trace sampled and exported", sampled),
        ]
        for (figure, _, counts) in tracedRuns {
            guard let counts else { continue }
            record(
                "edge GET api/notifications/{id}, tracing on, \(figure): instructions (edge + auth + payload)",
                counts.get.reduce(0, +), against: (name: "the same, tracing off", value: getTotal))
            record(
                "edge PUT api/register/{id}, tracing on, \(figure): instructions (edge + auth + registration)",
                counts.put.reduce(0, +), against: (name: "the same, tracing off", value: putTotal))
        }
        record(
            "NH PUT /{hub}/installations/{id}: instructions (edge + auth + registration)", nhPutTotal,
            against: helloWorld)
        record("NH PUT /{hub}/installations/{id}: instructions in herald-edge", nhPut[0], against: helloWorld)
        record(
            "lean FetchPayload: instructions in herald-payload", fetch, against: (name: "lean echo RPC", value: echo))
        if let plain {
            record(
                "lean FetchPayload, content sealed at rest: instructions in herald-payload", fetch,
                against: (name: "the same, content unsealed", value: plain.fetch))
            record(
                "edge GET api/notifications/{id}, content sealed at rest: instructions (edge + auth + payload)",
                getTotal, against: (name: "the same, content unsealed", value: plain.get.reduce(0, +)))
        }
        record(
            "template render (herald-dispatch, one locale template)", templates.render,
            against: (name: "native payload prepared", value: templates.nativeRender))
        record(
            "template send: instructions per device in herald-dispatch's audience step", templates.device,
            against: (name: "native send's target per device", value: templates.nativeDevice))
        func k(_ x: Double) -> String { String(format: "%.0f k", x / 1000) }
        let tracedRows = tracedRuns.compactMap { _, row, counts -> String? in
            guard let counts else { return nil }
            let rows = [
                ("edge GET api/notifications/{id}", counts.get, getTotal),
                ("edge PUT api/register/{id}", counts.put, putTotal),
            ]
            return rows.map { name, counts, off in
                let total = counts.reduce(0, +)
                return
                    "| \(name), tracing on, \(row) | \(k(counts[0])) | \(k(counts[1])) | \(k(counts[2])) | \(k(total)) | tracing off \(k(off)) | \(String(format: "%+.1f%%", 100 * (total / off - 1))) |"
            }.joined(separator: "\n")
        }.joined(separator: "\n")
        let sealedRows =
            plain.map { plain in
                let getPlain = plain.get.reduce(0, +)
                let getChange = String(format: "%+.1f%%", 100 * (getTotal / getPlain - 1))
                let fetchChange = String(format: "%+.1f%%", 100 * (fetch / plain.fetch - 1))
                return
                    "| edge GET api/notifications/{id}, content unsealed | \(k(plain.get[0])) | \(k(plain.get[1])) | \(k(plain.get[2])) | \(k(getPlain)) | sealed \(k(getTotal)) | sealed \(getChange) |\n"
                    + "| lean FetchPayload, content unsealed | | | \(k(plain.fetch)) | \(k(plain.fetch)) | sealed \(k(fetch)) | sealed \(fetchChange) |"
            } ?? ""
        report.tables = [
            """
            ## instructions: counted by callgrind in the serving processes, \(calls) calls one at a time after \(warmUp) to warm up

            | request | herald-edge | herald-auth | herald-payload or -registration | total | baseline | ratio |
            |---|---:|---:|---:|---:|---|---:|
            | edge GET api/notifications/{id} | \(k(get[0])) | \(k(get[1])) | \(k(get[2])) | \(k(getTotal)) | hello world GET \(k(helloGET)) | \(String(format: "%.1f×", getTotal / helloGET)) |
            | edge PUT api/register/{id} | \(k(put[0])) | \(k(put[1])) | \(k(put[2])) | \(k(putTotal)) | hello world GET \(k(helloGET)) | \(String(format: "%.1f×", putTotal / helloGET)) |
            | NH PUT /{hub}/installations/{id} | \(k(nhPut[0])) | \(k(nhPut[1])) | \(k(nhPut[2])) | \(k(nhPutTotal)) | hello world GET \(k(helloGET)) | \(String(format: "%.1f×", nhPutTotal / helloGET)) |
            | lean FetchPayload | | | \(k(fetch)) | \(k(fetch)) | lean echo \(k(echo)) | \(String(format: "%.1f×", fetch / echo)) |
            \(tracedRows)
            \(sealedRows)

            herald-dispatch's CPU work of a template send, without its I/O (`herald-bench template-loop`, whole runs under callgrind, differences of two):

            | step | template send | native send | ratio |
            |---|---:|---:|---:|
            | one rendering (a template's JSON read, its body and headers rendered, the payload checked) vs a native payload checked | \(k(templates.render)) | \(k(templates.nativeRender)) | \(String(format: "%.1f×", templates.render / templates.nativeRender)) |
            | per device of the audience (the row as decoded, its template looked up, a target made) | \(String(format: "%.0f", templates.device)) | \(String(format: "%.0f", templates.nativeDevice)) | \(String(format: "%.2f×", templates.device / templates.nativeDevice)) |

            A template send's audience step costs \(String(format: "%.0f", templates.device - templates.nativeDevice)) instructions per device more than a native send's; its renderings are made once per distinct template of a send (four in `herald-bench nh`).
            """
        ]
        if let misses = counter.misses.table(processes: "herald-edge / herald-auth / herald-payload or -registration") {
            report.tables.append(misses)
        }
        return report
    }

    /// The process ids of `services` in `stack`, in that order.
    static func pids(of services: [String], in stack: Stack) async throws -> [Int32] {
        try await services.asyncMap { service -> Int32 in
            guard let pid = await stack.pid(of: service) else { throw BenchError("herald-\(service) is not running") }
            return pid
        }
    }

    /// An edge GET api/notifications/{id} (edge, auth, payload) and PUT api/register/{id} (edge,
    /// auth, registration), counted per process as the edge bench's wrk runs send them; `pids` are
    /// auth's, payload's, edge's and registration's. Counts in the order edge, auth, then the third.
    private func tutorialCounts(
        _ stack: Stack, _ configuration: StackConfiguration, pids: [Int32], counter: Callgrind, label: String,
        settle: @Sendable (() async throws -> Void) async throws -> Void = { _ in }
    ) async throws -> (get: [Double], put: [Double], payloadID: Int64) {
        let payloadID = try await RPCClient.with(socketPath: configuration.socketPath("payload")) { client in
            try await PayloadServiceClient(client).storePayload(
                StorePayloadRequest(recipient: "bench", kind: .secure, content: Array("Secure confirmation.".utf8))
            ).id
        }
        let url = await stack.edgeURL + "/api/notifications/\(payloadID)"
        let authorization = "Basic " + Data("bench:bench".utf8).base64EncodedString()
        for _ in 0..<warmUp { try await Self.get(url, authorization: authorization) }
        try await settle { try await Self.get(url, authorization: authorization) }
        let get = try await counter.measureEach(
            [pids[2], pids[0], pids[1]], calls: calls, label: "edge GET, \(label)"
        ) {
            try await Self.get(url, authorization: authorization)
        }
        let handle = String(repeating: "ab", count: 32)
        let registrationID = try await RPCClient.with(socketPath: configuration.socketPath("registration")) { client in
            try await RegistrationServiceClient(client).createRegistrationId(
                CreateRegistrationIdRequest(owner: "bench", handle: handle)
            ).registrationID
        }
        let putURL = await stack.edgeURL + "/api/register/\(registrationID)"
        let body = #"{"Platform":"apns","Handle":"\#(handle)","Tags":["news"]}"#
        for _ in 0..<warmUp { try await Self.put(putURL, body: body, authorization: authorization) }
        try await settle { try await Self.put(putURL, body: body, authorization: authorization) }
        let put = try await counter.measureEach(
            [pids[2], pids[0], pids[3]], calls: calls, label: "edge PUT, \(label)"
        ) {
            try await Self.put(putURL, body: body, authorization: authorization)
        }
        return (get, put, payloadID)
    }

    static func put(_ url: String, body: String, authorization: String) async throws {
        var request = HTTPClientRequest(url: url)
        request.method = .PUT
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 200 else { throw BenchError("PUT \(url): \(response.status.code)") }
    }

    static func get(_ url: String, authorization: String?) async throws {
        var request = HTTPClientRequest(url: url)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 200 else { throw BenchError("GET \(url): \(response.status.code)") }
    }
}
