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

/// The simulated cache misses of labelled stretches of calls (`herald-bench instructions
/// --cache-sim`), per process and call.
final class CacheMisses: Sendable {
    /// One process's misses per call: first-level instruction and data caches, and the last level.
    struct PerCall: Sendable {
        var instructions: Double
        var i1: Double
        var d1: Double
        var last: Double

        /// Reads a dump's `events:` and `summary:` lines (Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw);
        /// `text` is the dump at `path`.
        init(dump text: String, path: String, calls: Int) throws {
            guard let names = text.firstMatch(of: /\nevents: ([^\n]*)/).map({ $0.1.split(separator: " ") }),
                let values = text.firstMatch(of: /\nsummary: ([^\n]*)/).map({ $0.1.split(separator: " ") })
            else { throw BenchError("no events or summary in \(path)") }
            var event: [Substring: Double] = [:]
            for (name, value) in zip(names, values) { event[name] = Double(value) }
            func sum(_ keys: Substring...) -> Double { keys.reduce(0) { $0 + (event[$1] ?? 0) } / Double(calls) }
            guard event["I1mr"] != nil else { throw BenchError("\(path) has no simulated cache events") }
            instructions = sum("Ir")
            i1 = sum("I1mr")
            d1 = sum("D1mr", "D1mw")
            last = sum("ILmr", "DLmr", "DLmw")
        }
    }

    private let rows = Mutex<[(label: String, processes: [PerCall])]>([])

    func add(_ label: String, _ processes: [PerCall]) { rows.withLock { $0.append((label, processes)) } }

    /// A table of the stretches' misses per call (each process's, and their sum), or nil when none
    /// was kept.
    func table(processes names: String) -> String? {
        let rows = rows.withLock { $0 }
        guard !rows.isEmpty else { return nil }
        func row(_ label: String, _ processes: [PerCall]) -> String {
            func cells(_ value: (PerCall) -> Double) -> String {
                let each = processes.map { String(format: "%.0f", value($0)) }.joined(separator: " / ")
                return "\(each) (\(String(format: "%.0f", processes.reduce(0) { $0 + value($1) })))"
            }
            return "| \(label) | \(cells(\.instructions)) | \(cells(\.i1)) | \(cells(\.d1)) | \(cells(\.last)) |"
        }
        return """
            ## simulated cache misses per request (callgrind --cache-sim=yes; caches as valgrind reads them from this CPU)

            Each cell: \(names), then their sum. Misses cost time that instruction counts do not show.

            | requests | instructions | I1 misses | D1 misses | last-level misses |
            |---|---:|---:|---:|---:|
            \(rows.map { row($0.label, $0.processes) }.joined(separator: "\n"))
            """
    }
}

/// Runs processes under callgrind and reads what a stretch of calls cost them.
struct Callgrind {
    var valgrind: String
    var control: String
    var dir: String
    /// A preloaded `sigsuspend` that hands the kernel a copy of its mask. Valgrind 3.19 writes
    /// into the mask it is given, and libdispatch passes a read-only one when an async `main`
    /// parks the main thread (`dispatch_main`): every Swift service would die of SIGSEGV there.
    var shim: String
    /// Simulate the caches as well (`--cache-sim=yes`); the misses of each labelled stretch go to
    /// ``misses``.
    var cacheSim = false
    let misses = CacheMisses()

    init(valgrind: String, control: String, dir: String) throws {
        self.valgrind = valgrind
        self.control = control
        self.dir = dir
        guard let cc = which("cc") ?? which("gcc") ?? which("clang") else {
            throw BenchError("a C compiler is needed for the sigsuspend shim")
        }
        let source = dir + "/sigsuspend-shim.c"
        try """
        #define _GNU_SOURCE
        #include <signal.h>
        #include <sys/syscall.h>
        #include <unistd.h>
        int sigsuspend(const sigset_t *mask) { sigset_t copy = *mask; return (int)syscall(SYS_rt_sigsuspend, &copy, 8); }

        """.write(toFile: source, atomically: true, encoding: .utf8)
        shim = dir + "/sigsuspend-shim.so"
        _ = try runProcess(cc, ["-shared", "-fPIC", "-O2", "-o", shim, source])
    }

    /// Copies of the executables without their DWARF: valgrind 3.19 cannot read the DWARF 5 that
    /// Swift 6 writes, and callgrind needs only the symbol table. Returns the copies' folder.
    func strippedCopies() throws -> String {
        guard let strip = which("strip") else { throw BenchError("strip is missing (binutils)") }
        let bin = dir + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        for name in [
            "herald-bench", "herald-auth", "herald-registration", "herald-payload", "herald-dispatch", "herald-edge",
        ] {
            _ = try runProcess(
                strip, ["--strip-debug", "-o", "\(bin)/\(name)", Stack.defaultBinDirectory() + "/" + name])
        }
        return bin
    }

    /// The launcher for a process named `name`: its counts go to `<dir>/callgrind.<name>.<pid>`.
    func launcher(_ name: String) -> [String] {
        [
            "/usr/bin/env", "LD_PRELOAD=\(shim)", valgrind, "--tool=callgrind",
            "--callgrind-out-file=\(dir)/callgrind.\(name).%p",
            "--log-file=\(dir)/valgrind.\(name).%p.log",
        ] + (cacheSim ? ["--cache-sim=yes"] : [])
    }

    func counted<T>(_ name: String, start: ([String]) async throws -> T) async throws -> T {
        try await start(launcher(name))
    }

    /// Instructions per call in `pids`, together.
    func measure(_ pids: [Int32], calls: Int, _ call: () async throws -> Void) async throws -> Double {
        try await measureEach(pids, calls: calls, call).reduce(0, +)
    }

    /// Instructions per call in each of `pids`; with ``cacheSim``, the simulated misses per call of
    /// a stretch with a `label` are kept in ``misses``.
    func measureEach(_ pids: [Int32], calls: Int, label: String? = nil, _ call: () async throws -> Void)
        async throws -> [Double]
    {
        for pid in pids { _ = try runProcess(control, ["-z", String(pid)], quiet: true) }
        for _ in 0..<calls { try await call() }
        var counts: [Double] = []
        let keepsMisses = cacheSim && label != nil
        var misses: [CacheMisses.PerCall] = []
        for pid in pids {
            let before = Set(try FileManager.default.contentsOfDirectory(atPath: dir))
            _ = try runProcess(control, ["-d", String(pid)], quiet: true)
            let dumped = try FileManager.default.contentsOfDirectory(atPath: dir).filter {
                !before.contains($0) && $0.contains(".\(pid).")
            }
            guard let file = dumped.first else { throw BenchError("callgrind wrote no dump for \(pid)") }
            if let keep = ProcessInfo.processInfo.environment["HERALD_BENCH_CALLGRIND_KEEP"] {
                // For callgrind_annotate: the dumps name functions (the copies keep their symbol tables).
                try? FileManager.default.createDirectory(atPath: keep, withIntermediateDirectories: true)
                try? FileManager.default.removeItem(atPath: "\(keep)/\(file)")
                try FileManager.default.copyItem(atPath: "\(dir)/\(file)", toPath: "\(keep)/\(file)")
            }
            let path = "\(dir)/\(file)"
            let text = try String(contentsOfFile: path, encoding: .utf8)
            counts.append(try Self.summary(of: text, path: path) / Double(calls))
            if keepsMisses { misses.append(try CacheMisses.PerCall(dump: text, path: path, calls: calls)) }
        }
        if let label, keepsMisses { self.misses.add(label, misses) }
        return counts
    }

    /// Instructions of a whole run of `executable` with `arguments`, start and exit included.
    func total(_ executable: String, _ arguments: [String]) throws -> Double {
        let out = "\(dir)/callgrind.total"
        try? FileManager.default.removeItem(atPath: out)
        _ = try runProcess(
            "/usr/bin/env",
            [
                "LD_PRELOAD=\(shim)", valgrind, "--tool=callgrind", "--callgrind-out-file=\(out)",
                "--log-file=\(dir)/valgrind.total.log", executable,
            ] + arguments, quiet: true)
        return try Self.summary(of: try String(contentsOfFile: out, encoding: .utf8), path: out)
    }

    /// The instruction count a callgrind dump's summary line gives; `text` is the dump at `path`.
    static func summary(of text: String, path: String) throws -> Double {
        guard let summary = text.firstMatch(of: /\nsummary: (\d+)/).flatMap({ Double($0.1) }) else {
            throw BenchError("no summary in \(path)")
        }
        return summary
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        out.reserveCapacity(count)
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
