// herald-fuzz: libFuzzer's driver over the targets in Tests/FuzzTargets (what each checks is
// listed there). Built only with HERALD_FUZZ=1 (Package.swift), with -sanitize=fuzzer,address;
// scripts/fuzz.sh builds and runs it. One binary, the target chosen by HERALD_FUZZ_TARGET.
import Foundation
import FuzzTargets
import Synchronization

/// libFuzzer's driver (libclang_rt.fuzzer, linked by `-sanitize=fuzzer`).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// The entry point SwiftPM links an executable target through (`main` is defined as
/// `<module>_main`); it hands the command line to libFuzzer's driver, as libFuzzer's own `main`
/// would.
@_cdecl("herald_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}

/// CPU time of this thread in milliseconds: what an input costs, whatever else the machine runs
/// (wall-clock time on a busy machine once reported a 46-byte token as taking a second).
func threadCPUMilliseconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
    return Double(spec.tv_sec) * 1000 + Double(spec.tv_nsec) / 1e6
}

/// The slowest input so far, in milliseconds of CPU time: reported on stderr each time it grows (scripts/fuzz.sh
/// prints the last), and past `HERALD_FUZZ_MAX_MS` (when set) a crash, so libFuzzer keeps the input.
/// libFuzzer's own `-timeout` counts whole seconds; the bound asked of the parsers is 100 ms. The
/// first input is not counted: it pays the target's one-time set-up (an in-memory database, tables).
let slowest = Mutex<(inputs: Int, millis: Double)>((0, 0))
let maxMilliseconds = ProcessInfo.processInfo.environment["HERALD_FUZZ_MAX_MS"].flatMap(Double.init)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let started = threadCPUMilliseconds()
    defer {
        let millis = threadCPUMilliseconds() - started
        let grew = slowest.withLock { slowest in
            slowest.inputs += 1
            guard slowest.inputs > 1, millis > slowest.millis else { return false }
            slowest.millis = millis
            return true
        }
        if grew {
            FileHandle.standardError.write(
                Data("herald-fuzz: slowest input so far: \(String(format: "%.1f", millis)) ms (\(size) bytes)\n".utf8))
            if let maxMilliseconds, millis > maxMilliseconds {
                fatalError("an input took \(millis) ms, over HERALD_FUZZ_MAX_MS=\(maxMilliseconds)")
            }
        }
    }
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    FuzzTarget.current.run(bytes)
    return 0
}

extension FuzzTarget {
    static let current: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["HERALD_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            fatalError("set HERALD_FUZZ_TARGET to one of \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return target
    }()
}
