import ArgumentParser
import DispatchService
import HeraldModel
import HeraldProto
import HeraldService
import NotificationHubs
import PushProviders
import RegistrationService

/// `herald-bench template-loop` (hidden): the CPU work of a template send without its I/O, for
/// `instructions` to count under callgrind. It renders the first of the NH bench's locale templates
/// `--renders` times (herald-dispatch's `TemplateAudience.render`, once per distinct template of a
/// send), then gives `--devices` template rows, in pages of 1,000 as registration streams them, to
/// one send's `TemplateAudience` (the per-device step: every row looked up by its template). With
/// `--native` it does instead what a native send does in their place: prepares the one payload and
/// makes a target per device. The instructions counted are those of the whole process, so
/// `instructions` runs it twice and takes the difference.
struct TemplateLoop: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "template-loop", abstract: "A template send's CPU work, for callgrind.", shouldDisplay: false)

    @Option(help: "Renderings of one template.") var renders = 0
    @Option(help: "Template rows given to one send's audience.") var devices = 0
    @Flag(help: "A native send's work instead: payloads prepared and targets made.") var native = false

    func run() throws {
        let properties = PushTemplate.Properties([("title", "Storm warning"), ("title_fr", "Alerte tempête")])
        let templates = NHScenario.locales.map { Installation.Template.message(wireJSON: $0.template.wireJSON) }
        let native = NativePayload(platform: .apns, body: Array(#"{"aps":{"alert":"Breaking: Storm warning"}}"#.utf8))
        var sink = 0
        for _ in 0..<renders {
            if self.native {
                sink &+= try PlatformRules.prepare(native, sentAt: 0).body.count
            } else {
                sink &+= try TemplateAudience.render(
                    templates[0], name: "news_en", platform: .apns, properties, sentAt: 0
                ).body.count
            }
        }
        var audience = TemplateAudience(properties: properties, sentAt: 0)
        var targets: [Outbox.Target] = []
        var made = 0
        while made < devices {
            // Each row's strings are its own, as decoded from registration's stream.
            let page = (made..<min(made + 1000, devices)).map { index in
                Registration(
                    registrationID: "t-bench-\(index)", platform: .apns, handle: String(repeating: "ab", count: 32),
                    hub: "bench",
                    template: Self.decoded(templates[index % 4], name: NHScenario.locales[index % 4].name))
            }
            if self.native {
                for registration in page {
                    targets.append(
                        Outbox.Target(
                            registrationID: registration.registrationID, platform: registration.platform,
                            handle: registration.handle))
                }
            } else {
                try audience.add(page)
            }
            made += page.count
        }
        sink &+= audience.targets.count + targets.count
        print(sink)
    }

    /// `template` named `name`, with strings of its own, as each row decoded from registration's
    /// stream has (equal strings that share storage compare without reading their bytes).
    static func decoded(_ template: InstallationTemplate, name: String) -> InstallationTemplate {
        func own(_ text: String) -> String { String(decoding: Array(text.utf8), as: UTF8.self) }
        return InstallationTemplate(
            name: own(name), body: own(template.body),
            headers: template.headers.map { HubRegistrationField(name: own($0.name), value: own($0.value)) },
            expiry: own(template.expiry))
    }
}
