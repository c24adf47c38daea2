import ArgumentParser
import Foundation
import HeraldStack

/// `herald-bench export`: `herald users export` of one person with 10,000 and 100,000 devices,
/// each with one delivery record and one inbox entry (a fan-out through the inbox provider), so
/// the document holds three items per device. The figure that matters is the exporter's peak RSS
/// at both sizes: streamed page by page, it must not grow with the person's data.
struct ExportBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "herald users export of one person with 10,000 and 100,000 devices: time, size, peak memory.")
    @OptionGroup var options: BenchOptions
    @Option(help: "Items each service hands over per call.")
    var pageSize = 500
    @Option(parsing: .upToNextOption, help: "The person's device counts to measure (default 10,000 and 100,000).")
    var devices: [Int] = []

    func run() async throws { try await execute() }

    func execute() async throws {
        var report = Report()
        for devices in !devices.isEmpty ? devices : options.quick ? [200, 2_000] : [10_000, 100_000] {
            report.add(try await ExportScenario(options: options, devices: devices, pageSize: pageSize).run())
        }
        try options.show(report, scenarios: ["export"])
    }
}

struct ExportScenario {
    var options: BenchOptions
    var devices: Int
    var pageSize: Int
    static let user = "exported.person"

    func run() async throws -> Report {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let configuration = StackConfiguration.bench(dir: dir)
        try FanoutScenario(options: options).seedRegistrations(
            devices, path: configuration.dataDirectory + "/registration.sqlite", owner: Self.user)
        let stack = Stack(configuration: configuration)
        try await stack.start()
        let run: (seconds: Double, peakMB: Double, status: Int32)
        var before: [String: Double] = [:]
        var after: [String: Double] = [:]
        let out = dir + "/export.json"
        do {
            let sent = try await FanoutRun.send(socket: configuration.socketPath("dispatch"), platform: .apns)
            guard sent.delivered == devices else {
                throw BenchError("the fan-out delivered \(sent.delivered) of \(devices)")
            }
            for service in ["registration", "dispatch"] {
                before[service] = try residentMegabytes(await stack.pid(of: service))
            }
            run = try spawnMeasured(
                configuration.binDirectory + "/herald",
                [
                    "users", "export", Self.user, "--out", out, "--page-size", "\(pageSize)", "--runtime-dir",
                    configuration.runtimeDirectory,
                ])
            for service in ["registration", "dispatch"] {
                after[service] = try residentMegabytes(await stack.pid(of: service))
            }
            await stack.stop()
        } catch {
            await stack.stop()
            throw error
        }
        guard run.status == 0 else { throw BenchError("herald users export exited with \(run.status)") }
        let bytes = (try FileManager.default.attributesOfItem(atPath: out)[.size] as? Int) ?? 0
        // The document is checked whole here (the bench may hold it; the exporter must not).
        let document = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out)))
        let counts = ["devices", "deliveries", "inbox"].map { ((document as? [String: Any])?[$0] as? [Any])?.count }
        guard counts.allSatisfy({ $0 == devices }) else {
            throw BenchError("the export holds \(counts) devices, deliveries and inbox entries, not \(devices) each")
        }
        var report = Report()
        let label = "\(devices) devices"
        report.records.append(
            Record(
                "export", "\(label): herald users export peak RSS", unit: "MB", value: run.peakMB,
                baseline: "document size", baselineValue: Double(bytes) / 1_048_576, better: "lower"))
        report.records.append(
            Record(
                "export", "\(label): items written per second", unit: "/s", value: Double(3 * devices) / run.seconds,
                baseline: "devices", baselineValue: Double(devices), better: "higher"))
        report.tables = [
            """
            ## export: herald users export of one person with \(devices) devices (\(3 * devices) items), pages of \(pageSize)

            | seconds | document | items/s | exporter peak RSS | registration RSS before → after | dispatch RSS before → after |
            |---:|---:|---:|---:|---:|---:|
            | \(String(format: "%.2f", run.seconds)) | \(format(Double(bytes) / 1_048_576)) MB | \(format(Double(3 * devices) / run.seconds)) | \(format(run.peakMB)) MB | \(format(before["registration", default: 0])) → \(format(after["registration", default: 0])) MB | \(format(before["dispatch", default: 0])) → \(format(after["dispatch", default: 0])) MB |
            """
        ]
        return report
    }
}

/// Runs `path` with `arguments` to its end: seconds, its peak RSS and its exit status.
///
/// The peak is the child's VmHWM, read every 10 ms until it exits. Not wait4's ru_maxrss: Linux
/// counts in it the parent's high-water mark too (posix_spawn's child shares the parent's memory
/// until exec), which is this benchmark's own after it parsed a document.
func spawnMeasured(_ path: String, _ arguments: [String]) throws -> (seconds: Double, peakMB: Double, status: Int32) {
    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let started = ContinuousClock.now
    let spawned = posix_spawn(&pid, path, nil, nil, argv, environ)
    guard spawned == 0 else { throw BenchError("posix_spawn \(path): \(String(cString: strerror(spawned)))") }
    var status: Int32 = 0
    var peak = 0.0
    while true {
        if let hwm = try? residentMegabytes(pid, peak: true) { peak = max(peak, hwm) }
        let done = waitpid(pid, &status, WNOHANG)
        if done == pid { break }
        guard done == 0 || errno == EINTR else { throw BenchError("waitpid: \(String(cString: strerror(errno)))") }
        usleep(10_000)
    }
    let seconds = (ContinuousClock.now - started).seconds
    // WIFEXITED / WEXITSTATUS: macros Swift does not import.
    let exit = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return (seconds, peak, exit)
}
