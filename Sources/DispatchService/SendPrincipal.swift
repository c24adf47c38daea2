import HeraldModel
import HeraldProto

extension SendRequest {
    /// Who sends it, as the send's `sender` column holds it: ``principal``'s user, or
    /// `key:<name>` for a hub's key (no user's name has a `:`, so no user reads a key's sends as
    /// their own through GetOutcome's `requester`). Without a principal, the deprecated `sender`
    /// as it is (a user's name, or `$sas` for a hub's key), read until 2027-03-01.
    /// INVALID_ARGUMENT for a principal that names both a user and a key.
    func storedSender() throws -> String {
        guard let principal else { return sender }
        guard principal.user.isEmpty || principal.hubKey.isEmpty else {
            throw ServiceError.invalidArgument("principal names a user or a hub key, not both")
        }
        return principal.hubKey.isEmpty ? principal.user : "key:" + principal.hubKey
    }
}

extension Principal {
    /// A send's `sender` column read back (``SendRequest/storedSender()``). `$sas`, a hub key's
    /// send stored before the key's name was, reads as a key without a name (such rows last the
    /// outbox's retention).
    init(stored: String) {
        if stored.hasPrefix("key:") {
            self.init(hubKey: String(stored.dropFirst(4)))
        } else if stored == Names.nhSender {
            self.init()
        } else {
            self.init(user: stored)
        }
    }

    /// The deprecated `Outcome.sender` of a send whose column holds `stored` (written until
    /// 2027-03-01): the user's name, or `$sas` for a hub's key, as before `principal`.
    static func legacySender(stored: String) -> String {
        stored.hasPrefix("key:") ? Names.nhSender : stored
    }
}
