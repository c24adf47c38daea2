import ArgumentParser
import Foundation
import HeraldService

/// `herald keys`: the key-encryption keys that seal herald-dispatch's push credentials and
/// herald-payload's content at rest (each service's `encryption-keys` folder).
struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The keys that seal push credentials and stored content at rest.",
        subcommands: [Rotate.self, List.self])

    /// The services that seal secrets, and their keyrings' folders in a stack made by `herald up`.
    static let services = ["dispatch", "payload"]

    struct Folders: ParsableArguments {
        @OptionGroup var data: DataOptions
        @Option(
            name: .customLong("keys"),
            help: "A keyring folder (a service's encryption-keys), instead of the stack's <data-dir>/<service>.keys.")
        var keys: [String] = []

        var all: [String] { keys.isEmpty ? Keys.services.map { "\(data.dataDirectory.path)/\($0).keys" } : keys }
    }

    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a new key current in each keyring; the services re-seal under it while they serve.",
            discussion: """
                The keys it replaces stay and keep opening what they sealed. Each service reads its folder again \
                every 10 seconds and then re-wraps every stored data key under the new key (the values themselves \
                are not rewritten); its log says "re-sealed … under the current key". Remove an old key's file \
                only after that, on every replica.
                """)
        @OptionGroup var folders: Folders

        func run() throws {
            for folder in folders.all {
                let name = "k" + String(Int(Date().timeIntervalSince1970 * 1000))
                try Keyring.addCurrentKey(folder: folder, name: name)
                let keyring = try Keyring(folder: folder)
                print("\(folder)\tcurrent \(keyring.current.name)\tkeys \(keyring.names.joined(separator: ", "))")
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List each keyring's keys, the current one first.")
        @OptionGroup var folders: Folders

        func run() throws {
            for folder in folders.all {
                guard FileManager.default.fileExists(atPath: folder) else {
                    print("\(folder)\tnone (its service stores unencrypted, or has not started)")
                    continue
                }
                let keyring = try Keyring(folder: folder)
                print("\(folder)\tcurrent \(keyring.current.name)\tkeys \(keyring.names.joined(separator: ", "))")
            }
        }
    }
}
