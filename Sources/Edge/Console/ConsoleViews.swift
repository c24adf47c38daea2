/// What each console template renders: one struct per page, read by swift-mustache through
/// `Mirror` by property name.
///
/// Why typed: a template's `{{#x}}…{{/x}}` section renders for any string, even "", and a name a
/// row lacks is looked up in the page around it. With dictionaries, empty strings had to be
/// dropped before rendering, and a dropped field then showed the page's value of the same name
/// (a delivered row's "next attempt" showed the page's "More deliveries" link). Here a field a
/// section tests is `String?` (nil: no section) and every other field is always present, so a row
/// never shows its page's value.
enum ConsoleView {
    struct Layout {
        var title: String
        var content: String
        var session: Session?
        var hub: HubLink?
    }

    struct Session {
        var user: String
        var csrf: String
        var admin: Bool
    }

    struct HubLink {
        var name: String
        var path: String
    }

    /// An `<option>` of a `<select>`.
    struct Option {
        var value: String
        var label: String
        var selected: Bool
    }

    struct Login {
        var csrf: String
        var message: String?
        var user: String
        var expired: Bool
    }

    struct Error {
        var status: Int
        var reason: String
        var message: String
    }

    struct Hubs {
        struct Row {
            var name: String
            var path: String
            var created: String
            var keys: String
            var limit: String
        }
        var hubs: [Row]
        var admin: Bool
        var csrf: String
    }

    struct Hub {
        /// One input of a platform's credentials form: its setting's name (the CLI's).
        struct Field {
            var id: String
            var name: String
            var label: String
            /// text, password or file.
            var type: String
            var accept: String?
            var placeholder: String?
            var required: Bool
        }
        struct Platform {
            var platform: String
            var status: String
            var source: String
            var summary: String
            var updated: String?
            /// When the credentials end (an APNs certificate), and whether they have ended or end
            /// within 14 days (the expiry alert's window).
            var expires: String?
            var expiresSoon: Bool
            var lastError: String?
            var lastErrorAt: String
            /// Where its form posts, and its inputs.
            var setAction: String
            var fields: [Field]
            /// Where deleting the hub's own credentials posts; nil when it has none.
            var deleteAction: String?
        }
        struct Key {
            var name: String
            var rights: String
            var rotate: String
            var revoke: String
        }
        /// The hub's console path, and the session's CSRF token for its forms.
        var path: String
        var csrf: String
        /// Every hub but the default may be deleted.
        var deletable: Bool
        struct Limit {
            var name: String
            var value: String
            var used: String
        }
        var name: String
        var created: String
        var platforms: [Platform]
        var keys: [Key]
        var limit: String
        /// Deliveries of its open sends not finished yet.
        var pending: String
        /// How long its oldest due delivery has waited.
        var oldestDue: String
        /// Requests this edge refused for the hub's rate.
        var refused: String
        var limits: [Limit]
    }

    /// A key's secrets, shown once after it was made or rotated.
    struct Secret {
        var hub: String
        var path: String
        var name: String
        var rights: String
        var primary: String
        var secondary: String
    }

    struct Devices {
        struct Row {
            var id: String
            var kind: String
            var owner: String
            var platform: String
            var handle: String
            var tags: String
            var updated: String
            var expired: Bool
            var send: String
            /// Where deleting it posts, and its owner for a tutorial registration (nil otherwise).
            var delete: String
            var deleteOwner: String?
        }
        var devices: [Row]
        var csrf: String
        var next: String?
        var user: String
        var tag: String
        var handle: String
        var platforms: [Option]
        var path: String
        var first: String?
    }

    struct Send {
        struct Preview {
            var platform: String
            var pushType: String
            var priority: String
            var contentType: String
            var body: String
        }
        var csrf: String
        var error: String?
        var user: String
        var tag: String
        var handle: String
        var text: String
        var message: String
        var properties: String
        var action: String
        var platforms: [Option]
        var targets: [Option]
        var kinds: [Option]
        var previewed = false
        var preview: [Preview] = []
        var template = false
        var stored = false
    }

    struct Sends {
        struct Row {
            var id: String
            var path: String
            var state: String
            var created: String
            var sender: String
            var counts: String
        }
        struct Reason {
            var reason: String
            var count: Int64
        }
        var sends: [Row]
        var next: String?
        /// SVG the edge drew itself (rendered unescaped).
        var chart: String
        var reasons: [Reason]
        var hasReasons: Bool
        var delivered: Int64
        var failed: Int64
        var sendsInHour: Int64
    }

    struct Outcome {
        struct Platform {
            var platform: String
            var success: Int64
            var failure: Int64
            var pending: Int64
            var removed: Int64
            var retries: Int64
            var failures: String
        }
        struct Delivery {
            var sequence: Int64
            var platform: String
            var state: String
            var attempts: Int64
            var status: String
            var reason: String
            var handle: String
            var messageID: String
            /// When a pending delivery is tried next; "" otherwise.
            var next: String
        }
        var id: String
        var state: String
        var live: Bool
        var sender: String
        var created: String
        var started: String?
        var finished: String?
        var platforms: [Platform]
        var deliveries: [Delivery]
        var next: String?
    }

    struct Inbox {
        struct Entry {
            var sequence: Int64
            var notificationID: String
            var platform: String
            var handle: String
            var recorded: String
            var headers: String
            var payload: String
        }
        var entries: [Entry]
        var next: String?
    }
}

extension String {
    /// nil for "": what a template's section tests.
    var nonEmpty: String? { isEmpty ? nil : self }
}
