import ArgumentParser
import Foundation
import HeraldProto
import HeraldRPC

/// `herald outcome <id>`: where a send stands.
struct OutcomeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outcome", abstract: "Show the outcome of a send (the id in its Location header).")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The notification id, n-…")
    var id: String

    func run() async throws {
        let outcome = try await withService("dispatch", stack) { client in
            try await client.call(DispatchServiceMethods.getOutcome, GetOutcomeRequest(notificationID: id))
        }
        print("\(outcome.notificationID)  \(outcome.state)  sent by \(outcome.sender)")
        for platform in outcome.platforms {
            print("  \(platform.platform.name): \(platform.success) delivered, \(platform.failure) failed")
        }
        if outcome.platforms.isEmpty { print("  no deliveries") }
    }
}
