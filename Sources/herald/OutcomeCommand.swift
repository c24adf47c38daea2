import ArgumentParser
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService

/// `herald outcome <id>`: where a send stands.
struct OutcomeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outcome", abstract: "Show the outcome of a send (the id in its Location header).")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The notification id, n-…")
    var id: String
    @Flag(help: "Also list every delivery: state, attempts, message id (apns-id), last status and reason.")
    var deliveries = false

    func run() async throws {
        let outcome = try await withService(.dispatch, stack) { client in
            try await DispatchServiceClient(client).getOutcome(GetOutcomeRequest(notificationID: id, scope: .all))
        }
        print("\(outcome.notificationID)  \(outcome.state)  sent by \(outcome.senderName)")
        for platform in outcome.platforms {
            var line =
                "  \(platform.platform.name): \(platform.success) delivered, \(platform.failure) failed, \(platform.pending) pending"
            if platform.retries > 0 { line += ", \(platform.retries) retries" }
            if platform.removedHandles > 0 { line += ", \(platform.removedHandles) dead handles removed" }
            print(line)
            for failure in platform.failures { print("    \(failure.reason): \(failure.count)") }
        }
        if outcome.platforms.isEmpty { print("  no deliveries") }
        guard deliveries else { return }
        var after: Int64 = 0
        while true {
            let page = try await withService(.dispatch, stack) { client in
                try await DispatchServiceClient(client).listDeliveries(
                    ListDeliveriesRequest(notificationID: id, afterSequence: after, limit: 1000, scope: .all))
            }.deliveries
            for d in page {
                print(
                    "  #\(d.sequence) \(d.registrationID) \(d.platform.name) \(d.state) attempts=\(d.attempts) id=\(d.messageID)"
                        + (d.lastStatus == 0 ? "" : " status=\(d.lastStatus)")
                        + (d.reason.isEmpty ? "" : " reason=\(d.reason)"))
            }
            guard let last = page.last, page.count == 1000 else { break }
            after = last.sequence
        }
    }
}
