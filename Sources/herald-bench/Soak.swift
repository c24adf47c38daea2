import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldModel
import HeraldStack
import NIOCore
import Synchronization

/// `herald-bench soak --minutes N`: the tutorial's traffic at a fixed rate through the whole
/// stack for N minutes, printing each service's resident memory every sample; then each service's
/// growth from the end of the warm-up to the end of the run (the figure: it should stay within 5%).
///
/// The mix, per user with two devices: update a registration (PUT), look one up (POST
/// api/register?handle=), a secure push (`POST api/notifications`), a `/v1` secure upload and its
/// fetch (GET api/notifications/{id}), and notify users. Any answer other than 2xx is counted and
/// fails the run: a soak that errors measures the wrong thing.
struct SoakBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak", abstract: "Mixed tutorial traffic at a fixed rate; RSS per service over time.")

    @OptionGroup var options: BenchOptions
    @Option(help: "How long the traffic runs.")
    var minutes: Double = 30
    @Option(help: "Requests per second (whole stack).")
    var rate: Double = 200
    @Option(help: "Minutes of warm-up before the growth is measured (default: a sixth of the run, at most 5).")
    var warmupMinutes: Double?
    @Option(help: "Seconds between memory samples (default 60; 10 for runs of 2 minutes or less).")
    var sampleSeconds: Double?

    func run() async throws { try await execute() }

    func execute() async throws {
        let scenario = SoakScenario(
            options: options, minutes: minutes, rate: rate, warmupMinutes: warmupMinutes ?? min(5, minutes / 6),
            sampleSeconds: sampleSeconds ?? (minutes <= 2 ? 10 : 60))
        try options.show(try await scenario.run(), scenarios: ["soak"])
    }
}

struct SoakScenario {
    var options: BenchOptions
    var minutes: Double
    var rate: Double
    var warmupMinutes: Double
    var sampleSeconds: Double

    static let users = (0..<10).map { "soak\($0)" }
    static let services = ServiceName.allCases.map(\.rawValue)

    /// Requests done, and those answered with anything but 2xx (with a few examples).
    final class Tally: Sendable {
        let done = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
        let examples = Mutex<[String]>([])

        func record(_ status: UInt, _ what: String) {
            done.add(1, ordering: .relaxed)
            guard !(200..<300).contains(status) else { return }
            failed.add(1, ordering: .relaxed)
            examples.withLock { if $0.count < 5 { $0.append("\(status) \(what)") } }
        }
    }

    func run() async throws -> Report {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let configuration = StackConfiguration.bench(dir: dir)
        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            let report = try await drive(stack: stack, base: await stack.edgeURL)
            await stack.stop()
            return report
        } catch {
            await stack.stop()
            throw error
        }
    }

    func drive(stack: Stack, base: String) async throws -> Report {
        // Two devices per user, their registration ids kept for the PUTs.
        var registrations: [(user: String, id: String, handle: String)] = []
        for (index, user) in Self.users.enumerated() {
            for device in 0..<2 {
                let handle = String(format: "%064x", index * 2 + device + 1)
                let id = try await Self.request("POST", base + "/api/register?handle=\(handle)", user: user).text
                    .trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                let put = try await Self.request(
                    "PUT", base + "/api/register/\(id)", user: user,
                    body: #"{"Platform":"apns","Handle":"\#(handle)","Tags":["soak"]}"#)
                guard put.status == 200 else { throw BenchError("seeding a registration: \(put.status) \(put.text)") }
                registrations.append((user, id, handle))
            }
        }
        let seeded = registrations

        let tally = Tally()
        let start = ContinuousClock.now
        let end = start + .seconds(minutes * 60)
        let lanes = 8
        let period = Duration.seconds(Double(lanes) / rate)
        let traffic = Task {
            await withTaskGroup(of: Void.self) { group in
                for lane in 0..<lanes {
                    group.addTask {
                        var next = ContinuousClock.now + period * Double(lane) / Double(lanes)
                        var step = lane
                        while next < end {
                            try? await Task.sleep(until: next)
                            await Self.step(step, registrations: seeded, base: base, tally: tally)
                            step += lanes
                            next += period
                            // Behind schedule (a slow answer): skip ahead rather than burst.
                            if next < ContinuousClock.now { next = ContinuousClock.now }
                        }
                    }
                }
            }
        }

        var samples: [(minute: Double, rss: [String: Double])] = []
        func sample() async throws {
            var rss: [String: Double] = [:]
            for service in Self.services { rss[service] = try residentMegabytes(await stack.pid(of: service)) }
            let minute = (ContinuousClock.now - start).seconds / 60
            samples.append((minute, rss))
            let line = Self.services.map { "\($0) \(String(format: "%.1f", rss[$0, default: 0]))" }.joined(
                separator: ", ")
            print(
                "soak \(String(format: "%5.1f", minute)) min, \(tally.done.load(ordering: .relaxed)) requests: RSS MB \(line)"
            )
        }
        try await sample()
        while ContinuousClock.now < end {
            try await Task.sleep(until: min(end, ContinuousClock.now + .seconds(sampleSeconds)))
            try await sample()
        }
        await traffic.value
        for service in Self.services where await stack.restartCount(of: service) > 0 {
            throw BenchError("herald-\(service) restarted during the soak")
        }
        let failed = tally.failed.load(ordering: .relaxed)
        guard failed == 0 else {
            throw BenchError(
                "\(failed) of \(tally.done.load(ordering: .relaxed)) requests failed, e.g. \(tally.examples.withLock { $0 })"
            )
        }

        // Growth: from the first sample at or after the warm-up to the last one.
        let warm = samples.first { $0.minute >= warmupMinutes } ?? samples[0]
        let last = samples[samples.count - 1]
        let done = tally.done.load(ordering: .relaxed)
        let achieved = Double(done) / (ContinuousClock.now - start).seconds
        var report = Report()
        var lines = [
            "## soak: tutorial traffic at \(format(rate)) req/s for \(format(minutes)) min (\(done) requests, \(format(achieved))/s achieved, 0 failed)",
            "",
            "| service | RSS after \(format(warm.minute)) min warm-up, MB | RSS at \(format(last.minute)) min, MB | growth |",
            "|---|---:|---:|---:|",
        ]
        for service in Self.services {
            let before = warm.rss[service, default: 0]
            let after = last.rss[service, default: 0]
            lines.append(
                "| \(service) | \(format(before)) | \(format(after)) | \(String(format: "%+.1f%%", (after / before - 1) * 100)) |"
            )
            report.records.append(
                Record(
                    "soak", "\(service) RSS at the end", unit: "MB", value: after,
                    baseline: "its RSS after the warm-up",
                    baselineValue: before, better: "lower", target: "≤ 1.05× (5% growth)"))
        }
        lines += ["", "samples (minute: RSS MB auth/registration/payload/dispatch/edge):"]
        for s in samples {
            lines.append(
                "- \(format(s.minute)): " + Self.services.map { format(s.rss[$0, default: 0]) }.joined(separator: " / ")
            )
        }
        report.tables = [lines.joined(separator: "\n")]
        return report
    }

    /// One request of the mix; `step` picks which, and for whom.
    static func step(
        _ step: Int, registrations: [(user: String, id: String, handle: String)], base: String, tally: Tally
    ) async {
        let registration = registrations[step % registrations.count]
        let user = registration.user
        do {
            switch step % 6 {
            case 0:
                let reply = try await request(
                    "PUT", base + "/api/register/\(registration.id)", user: user,
                    body: #"{"Platform":"apns","Handle":"\#(registration.handle)","Tags":["soak","t\#(step % 7)"]}"#)
                tally.record(reply.status, "PUT api/register")
            case 1:
                tally.record(
                    try await request("POST", base + "/api/register?handle=\(registration.handle)", user: user).status,
                    "POST api/register")
            case 2:
                tally.record(
                    try await request("POST", base + "/api/notifications", user: user).status, "POST api/notifications")
            case 3:
                let sent = try await request(
                    "POST", base + "/v1/notifications?kind=secure&to_user=\(user)", user: user, body: "soak \(step)")
                tally.record(sent.status, "POST /v1/notifications")
                if let id = sent.text.firstMatch(of: /"payloadId":(\d+)/)?.1 {
                    tally.record(
                        try await request("GET", base + "/api/notifications/\(id)", user: user).status,
                        "GET api/notifications")
                }
            case 4:
                let target = registrations[(step / 6) % registrations.count].user
                let reply = try await request(
                    "POST", base + "/api/notifications?pns=apns&to_tag=\(target)", user: user, body: "\"soak \(step)\"")
                tally.record(reply.status, "notify users")
            default:
                tally.record(try await request("GET", base + "/healthz", user: user).status, "GET /healthz")
            }
        } catch {
            tally.record(0, "\(error)")
        }
    }

    struct Reply {
        var status: UInt
        var text: String
    }

    static func request(_ method: String, _ url: String, user: String, body: String? = nil) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = .RAW(value: method)
        request.headers.add(name: "Authorization", value: "Basic " + Data("\(user):\(user)".utf8).base64EncodedString())
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return Reply(status: response.status.code, text: String(buffer: bytes))
    }
}
