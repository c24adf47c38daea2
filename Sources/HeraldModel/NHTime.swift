import Foundation

/// The times NH's clients send (`ServiceBusNotification-ScheduleTime`,
/// `ServiceBusNotification-Apns-Expiry`), read leniently as nh-api.md §6.5 lists them: .NET and
/// Java `2024-01-01T08:00:00` (no zone: UTC), JS `2024-01-01T08:00:00.000Z`, Python
/// `isoformat()` with `+00:00`, and the Python sample's `2024-01-01'T'08:00:00`, quoted.
public enum NHTime {
    public static func parse(_ text: String) -> Date? {
        var value = text.trimmingCharacters(in: .whitespaces)
        if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
            value = String(value.dropFirst().dropLast())
        }
        value = value.replacingOccurrences(of: "'T'", with: "T")
        guard
            let match = value.wholeMatch(
                of: /(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|z|[+-]\d{2}:?\d{2})?/)
        else { return nil }
        var components = DateComponents()
        components.calendar = Calendar(identifier: .gregorian)
        components.timeZone = TimeZone(secondsFromGMT: 0)
        components.year = Int(match.1)
        components.month = Int(match.2)
        components.day = Int(match.3)
        components.hour = Int(match.4)
        components.minute = Int(match.5)
        components.second = Int(match.6)
        guard components.isValidDate, let base = components.date else { return nil }
        var date = base
        if let fraction = match.7, let seconds = Double("0" + fraction) { date += seconds }
        if let zone = match.8, zone != "Z", zone != "z" {
            let digits = zone.dropFirst().filter(\.isNumber)
            guard let hours = Int(digits.prefix(2)), let minutes = Int(digits.suffix(2)), hours < 24, minutes < 60 else { return nil }
            let offset = TimeInterval(hours * 3600 + minutes * 60)
            date -= zone.first == "-" ? -offset : offset
        }
        return date
    }
}

/// NH's inference of `apns-push-type` when a send names none: `background` when
/// `content-available` is the payload's only content, else `alert`.
public enum APNsPushType {
    public static func inferred(_ body: [UInt8]) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let aps = object["aps"] as? [String: Any]
        else { return "alert" }
        let visible = aps["alert"] != nil || aps["badge"] != nil || aps["sound"] != nil
        return (aps["content-available"] as? Int) == 1 && !visible ? "background" : "alert"
    }
}
