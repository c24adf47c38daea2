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

extension StackConfiguration {
    /// The stack every scenario measures: under `dir`/stack, tutorial auth (no password hashing in
    /// the figures), a free port, quiet logs kept in files.
    static func bench(dir: String) -> StackConfiguration {
        var configuration = StackConfiguration(directory: dir + "/stack")
        configuration.httpPort = 0
        configuration.authMode = .tutorial
        configuration.logLevel = "notice"
        configuration.captureLogs = true
        return configuration
    }
}

func temporaryDirectory() throws -> String {
    var template = Array("/tmp/herald-bench-XXXXXX".utf8CString)
    guard let path = mkdtemp(&template) else { throw BenchError("mkdtemp failed") }
    return String(cString: path)
}

/// The numbers of `/proc/<pid>/<file>` by name, for the files written as `Name:  value [kB]` lines
/// (status, io, smaps_rollup), read once.
func procFields(_ pid: Int32, _ file: String) throws -> [String: Double] {
    let text = try String(contentsOfFile: "/proc/\(pid)/\(file)", encoding: .utf8)
    var fields: [String: Double] = [:]
    for line in text.split(separator: "\n") {
        guard let colon = line.firstIndex(of: ":"),
            let value = line[line.index(after: colon)...].split(whereSeparator: \.isWhitespace).first.flatMap({
                Double($0)
            })
        else { continue }
        fields[String(line[..<colon])] = value
    }
    return fields
}

/// Resident set size of a process, in MB (VmRSS from /proc); with `peak`, the most it has had (VmHWM).
func residentMegabytes(_ pid: Int32?, peak: Bool = false) throws -> Double {
    guard let pid else { throw BenchError("a service is not running") }
    let field = peak ? "VmHWM" : "VmRSS"
    guard let kilobytes = try procFields(pid, "status")[field] else { throw BenchError("no \(field) for \(pid)") }
    return kilobytes / 1024
}

/// PSS and anonymous memory of a process, in MB (from /proc/<pid>/smaps_rollup).
struct Memory {
    var pss: Double
    var anonymous: Double

    static func read(_ pid: Int32?) throws -> Memory {
        guard let pid else { throw BenchError("a service is not running") }
        let fields = try procFields(pid, "smaps_rollup")
        return Memory(pss: (fields["Pss"] ?? 0) / 1024, anonymous: (fields["Pss_Anon"] ?? 0) / 1024)
    }
}

func which(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs a program to completion; its standard output, or an error with its standard error.
/// `quiet`: its standard error goes nowhere (openssl's chatter). `environment`: instead of this
/// process's.
func runProcess(
    _ executable: String, _ arguments: [String], quiet: Bool = false, environment: [String: String]? = nil
) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    if quiet { process.standardError = FileHandle.nullDevice }
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw BenchError("\(executable) exited \(process.terminationStatus)") }
    return String(decoding: data, as: UTF8.self)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
