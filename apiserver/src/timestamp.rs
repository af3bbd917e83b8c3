//! Timestamps as Kubernetes writes them (`metav1.Time`): RFC 3339 at second precision, UTC.

/// Now, in RFC 3339 at second precision (as `metav1.Time` marshals).
pub fn now_rfc3339() -> String {
    rfc3339(jiff::Timestamp::now())
}

/// `at` in RFC 3339 at second precision, UTC (`2026-11-25T18:40:00Z`), written digit by digit:
/// every create stamps its object and its `managedFields` entry, and `strftime` parses its
/// format each time.
pub fn rfc3339(at: jiff::Timestamp) -> String {
    let t = jiff::tz::Offset::UTC.to_datetime(at);
    let mut out = String::with_capacity(20);
    let parts = [
        (i32::from(t.year()), 4, '-'),
        (i32::from(t.month()), 2, '-'),
        (i32::from(t.day()), 2, 'T'),
        (i32::from(t.hour()), 2, ':'),
        (i32::from(t.minute()), 2, ':'),
        (i32::from(t.second()), 2, 'Z'),
    ];
    for (n, width, separator) in parts {
        for place in (0..width).rev() {
            let digit = u32::try_from(n / 10i32.pow(place) % 10).unwrap_or(0);
            out.push(char::from_digit(digit, 10).unwrap_or('0'));
        }
        out.push(separator);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Written as `strftime` writes it, for every second from 1970 to 9999.
        #[test]
        fn timestamps_should_be_written_as_strftime_writes_them(seconds in 0i64..253_402_300_799) {
            let at = jiff::Timestamp::from_second(seconds).expect("in range");
            proptest::prop_assert_eq!(rfc3339(at), at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
    }
}
