public import Foundation

/// Runs a program to completion and returns its exit status and output; `input` is its standard input.
///
/// The wait happens on a thread of its own, never on the cooperative pool: the pool has one thread
/// per core (two in CI), and a test blocking one while a python client or openssl runs stalls every
/// other test's async code, long enough for their HTTP deadlines to fire on answers that had
/// already arrived (the cause of the fault drill's rare `deadlineExceeded`).
public func runProgram(
    _ executable: String, _ arguments: [String], input: String? = nil, environment: [String: String] = [:]
) async throws -> (status: Int32, output: String, error: String) {
    try await withCheckedThrowingContinuation { continuation in
        Thread {
            continuation.resume(
                with: Result { try runProgramBlocking(executable, arguments, input: input, environment: environment) })
        }.start()
    }
}

/// ``runProgram(_:_:input:environment:)`` on the caller's thread: only for quick commands in a
/// `defer`, where nothing may be awaited.
public func runProgramBlocking(
    _ executable: String, _ arguments: [String], input: String? = nil, environment: [String: String] = [:]
) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    if let input {
        let pipe = Pipe()
        process.standardInput = pipe
        pipe.fileHandleForWriting.write(Data(input.utf8))
        try pipe.fileHandleForWriting.close()
    }
    let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("herald-\(UUID().uuidString).err")
    _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: errorFile) }
    let out = Pipe()
    process.standardOutput = out
    process.standardError = try FileHandle(forWritingTo: errorFile)
    try process.run()
    let output = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let error = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
    return (process.terminationStatus, String(decoding: output, as: UTF8.self), error)
}

/// The first program called `name` on PATH.
public func which(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}
