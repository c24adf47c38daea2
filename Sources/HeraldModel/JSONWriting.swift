import Foundation

/// `JSONSerialization.data(withJSONObject:options:)` that cannot trap.
///
/// Foundation's writer does not throw when the top-level object is neither an array nor a
/// dictionary: it stops the process ("Top-level object was not NSArray or NSDictionary"), which
/// from a request path kills every request in flight (issue 47: the console's preview of a
/// template body `1` did). Here `.fragmentsAllowed` is always set, so a bare string or number is
/// written as itself, and a value JSON cannot hold (NaN, a date) is a thrown error, never a trap.
/// `scripts/trap-check.sh` flags every other use of `withJSONObject` in Sources/.
public func jsonData(_ object: Any, options: JSONSerialization.WritingOptions = []) throws -> Data {
    // trap-ok: .fragmentsAllowed turns off the writer's only trap (a top-level fragment)
    try JSONSerialization.data(withJSONObject: object, options: options.union(.fragmentsAllowed))
}
