import ArgumentParser
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack

/// `herald-bench console`: the web console's device search over a hub of 1,000,000 devices
/// (paginated on the server, for hubs of a million devices). Each ListDevices query the devices
/// page makes is timed through herald-registration's lean socket, median of several calls, next
/// to a Health.Check on the same connection (the RPC's own floor).
struct ConsoleBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console",
        abstract: "The console's device search (ListDevices) over 1,000,000 devices: ms per page.")
    @OptionGroup var options: BenchOptions
    @Option(help: "Devices in the hub (--quick: 2,000).")
    var devices = 1_000_000

    func run() async throws { try await execute() }

    func execute() async throws {
        try options.show(
            try await ConsoleScenario(options: options, devices: options.quick ? 2_000 : devices).run(),
            scenarios: ["console"])
    }
}

struct ConsoleScenario {
    var options: BenchOptions
    var devices: Int

    func run() async throws -> Report {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let configuration = StackConfiguration.bench(dir: dir)
        // user0…user999 own 1,000 devices each; every device carries "fanout"; handles are the index in hex.
        try FanoutScenario(options: options).seedRegistrations(
            devices, path: configuration.dataDirectory + "/registration.sqlite")
        let stack = Stack(configuration: configuration)
        try await stack.start()
        do {
            let last = String(format: "r-bench-%08d", devices - 60)
            let queries: [(String, ListDevicesRequest)] = [
                ("first page, no filter", ListDevicesRequest(limit: 50, scope: .hub)),
                ("a page at the end (after id \(last))", ListDevicesRequest(afterID: last, limit: 50, scope: .hub)),
                ("one user's devices", ListDevicesRequest(user: "user7", limit: 50, scope: .hub)),
                ("a tag every device carries", ListDevicesRequest(tag: "fanout", limit: 50, scope: .hub)),
                (
                    "two users' tags (||: every device tested)",
                    ListDevicesRequest(tag: "username:user7 || username:user8", limit: 50, scope: .hub)
                ),
                ("a tag no device carries", ListDevicesRequest(tag: "nobody", limit: 50, scope: .hub)),
                (
                    "16 handles by a 63-digit prefix",
                    ListDevicesRequest(
                        handlePrefix: String(String(format: "%064x", devices / 2).prefix(63)), limit: 50, scope: .hub)
                ),
                (
                    "a platform no device is on (every device tested)",
                    ListDevicesRequest(platform: .wns, limit: 50, scope: .hub)
                ),
            ]
            let calls = options.quick ? 3 : 7
            var rows: [(String, Double, Int)] = []
            var floor = 0.0
            try await RPCClient.with(socketPath: configuration.socketPath("registration"), timeout: .seconds(120)) {
                client in
                let registration = RegistrationServiceClient(client)
                let health = HealthClient(client)
                floor = try await Self.median(calls) { _ = try await health.check(HealthCheckRequest()) }
                for (name, request) in queries {
                    var found = 0
                    let ms = try await Self.median(calls) {
                        found = try await registration.listDevices(request).devices.count
                    }
                    rows.append((name, ms, found))
                }
            }
            await stack.stop()
            var report = Report()
            var table = [
                "## console: ListDevices over \(devices) devices (SQLite), median of \(calls) calls",
                "",
                "| query | ms | devices answered |",
                "|---|---:|---:|",
                "| baseline: Health.Check on the same connection | \(String(format: "%.2f", floor)) | |",
            ]
            for (name, ms, found) in rows {
                table.append("| \(name) | \(String(format: "%.2f", ms)) | \(found) |")
                report.records.append(
                    Record(
                        "console", "ListDevices over \(devices) devices: \(name)", unit: "ms", value: ms,
                        baseline: "Health.Check on the same connection", baselineValue: floor, better: "lower"))
            }
            report.tables = [table.joined(separator: "\n")]
            return report
        } catch {
            await stack.stop()
            throw error
        }
    }

    /// The median wall time of `count` calls, in milliseconds.
    static func median(_ count: Int, _ body: () async throws -> Void) async throws -> Double {
        var times: [Double] = []
        for _ in 0..<count {
            let started = ContinuousClock.now
            try await body()
            let elapsed = ContinuousClock.now - started
            times.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
        }
        return times.sorted()[times.count / 2]
    }
}
