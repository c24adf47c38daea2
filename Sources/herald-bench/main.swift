import ArgumentParser
import Foundation
import HeraldService

// Before any task runs, on the main thread (see HeraldProcess.installEventLoopExecutor).
// Opt-in: the services do not do this (their handlers make blocking SQLite calls), so by default
// the benchmark measures what they run.
if ProcessInfo.processInfo.environment["HERALD_NIO_EXECUTOR"] == "1" {
    HeraldProcess.installEventLoopExecutor()
}
do {
    // Not `@main`: the executor must be installed before any task exists. Called from here, `run()`
    // resolves to ArgumentParser's synchronous default, so the subcommands' work is `execute()`.
    switch try HeraldBench.parseAsRoot() {
    case let command as AllBench: try await command.execute()
    case let command as RPCBench: try await command.execute()
    case let command as EdgeBench: try await command.execute()
    case let command as FanoutBench: try await command.execute()
    case let command as NHBench: try await command.execute()
    case let command as SoakBench: try await command.execute()
    case let command as ServeBench: try await command.execute()
    case let command as HelloServer: try await command.execute()
    case let command as APNsDoubleCommand: try await command.execute()
    case let command as InstructionsBench: try await command.execute()
    case let command as ReplicasBench: try await command.execute()
    case let command as ConsoleBench: try await command.execute()
    case let command as ExportBench: try await command.execute()
    case let command as PeersBench: try await command.execute()
    case let command as TenantsBench: try await command.execute()
    case var command: try command.run()
    }
} catch {
    HeraldBench.exit(withError: error)
}
