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

/// Options every scenario shares.
struct BenchOptions: ParsableArguments {
    @Flag(help: "Seconds instead of minutes, small sizes: checks every scenario runs and yields numbers (CI).")
    var quick = false
    @Flag(help: "Fan out to 1,000,000 registrations instead of 100,000.")
    var large = false
    @Option(help: "Seconds each measuring phase runs.")
    var seconds: Double = 3
    @Option(help: "Write the figures as JSON (one record per figure) to this file.")
    var json: String?

    var phaseSeconds: Double { quick ? 0.3 : seconds }
    var wrkSeconds: Int { quick ? 1 : max(2, Int(seconds * 2)) }
    var fanoutSize: Int { quick ? 2_000 : (large ? 1_000_000 : 100_000) }

    /// Prints a scenario's tables, then ``finish(_:scenarios:)``.
    func show(_ report: Report, scenarios: [String]) throws {
        print(report.tables.joined(separator: "\n\n"))
        try finish(report, scenarios: scenarios)
    }

    /// Checks the figures in quick mode (numbers, never thresholds), then writes the JSON.
    func finish(_ report: Report, scenarios: [String]) throws {
        if quick { try report.check(scenarios: scenarios) }
        if let json {
            try report.write(json: json)
            print("\nfigures written to \(json)")
        }
    }
}

/// `herald-bench` (or `herald-bench all`): every scenario, one table each, then a summary of each
/// figure next to its baseline.
struct AllBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "all",
        abstract:
            "Run every scenario: rpc, edge, fanout (inbox, APNs to the double and to nghttpd, FCM), memory, nh, instructions."
    )
    @OptionGroup var options: BenchOptions
    @Option(
        help: """
            A scenario to leave out (repeatable): scripts/test.sh runs `instructions` on its own, \
            beside the container tests, since callgrind's counts do not move with the machine's load.
            """)
    var skip: [String] = []

    func run() async throws { try await execute() }

    func execute() async throws {
        // Each entry: the scenario names its report holds, and how to run it.
        let scenarios: [(names: [String], run: () async throws -> Report)] = [
            (["rpc"], { try await RPCScenario(options: options).run() }),
            (["edge"], { try await EdgeScenario(options: options).run() }),
            (["fanout", "memory"], { try await FanoutScenario(options: options).run() }),
            (["fanout-apns"], { try await APNsFanoutScenario(options: options).run() }),
            (["fanout-apns-nghttpd"], { try await APNsFanoutScenario(options: options, nghttpd: true).run() }),
            (["fanout-fcm"], { try await APNsFanoutScenario(options: options, platform: .fcm).run() }),
            (["nh"], { try await NHScenario(options: options).run() }),
            (["tenants"], { try await TenantsScenario(options: options).run() }),
            (["instructions"], { try await InstructionsScenario(options: options).run() }),
        ]
        let known = Set(scenarios.flatMap(\.names))
        if let unknown = skip.first(where: { !known.contains($0) }) {
            throw ValidationError("--skip \(unknown): no such scenario (\(known.sorted().joined(separator: ", ")))")
        }
        let chosen = scenarios.filter { scenario in !scenario.names.contains(where: skip.contains) }
        var report = Report()
        let started = ContinuousClock.now
        for scenario in chosen { report.add(try await scenario.run()) }
        for table in report.tables { print(table + "\n") }
        print("## summary (ratio = value ÷ baseline; see `better` in the JSON for which way is good)\n")
        print(report.summary())
        print("\nall scenarios in \((ContinuousClock.now - started).wholeMilliseconds / 1000) s")
        try options.finish(report, scenarios: chosen.flatMap(\.names))
    }
}
