/**
 * Python's `datetime.strftime` as chat templates see it through `strftime_now` (Llama 3.2's
 * "Today Date: %d %b %Y", gpt-oss's "%Y-%m-%d"): the C locale's English names whatever the
 * machine's locale, local time with no zone (Python's `datetime.now()` is naive, so `%z` and `%Z`
 * are empty), and glibc's `-` flag ("%-d" -> "7") that Python passes through on Linux.
 * @huggingface/jinja's own strftime_now knows eight directives and names months in the process's
 * locale, so "%b" could print "mars" where transformers prints "Mar".
 */

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];

/** Day of the year, 1-based, in local time. */
function dayOfYear(d: Date): number {
  const start = new Date(d.getFullYear(), 0, 1);
  const today = new Date(d.getFullYear(), d.getMonth(), d.getDate());
  // Whole days between two local midnights; rounding absorbs a daylight-saving hour.
  return Math.round((today.getTime() - start.getTime()) / 86_400_000) + 1;
}

/** Week of the year with weeks starting on `firstDay` (0 Sunday for %U, 1 Monday for %W), as C counts them. */
function weekOfYear(d: Date, firstDay: number): number {
  const yday = dayOfYear(d) - 1;
  const wday = (d.getDay() - firstDay + 7) % 7;
  return Math.floor((yday + 7 - wday) / 7);
}

function pad(n: number, width: number, fill = "0"): string {
  return String(n).padStart(width, fill);
}

/** One numeric directive: its value and its zero-padded width. */
function numeric(d: Date, c: string): [number, number] | null {
  switch (c) {
    case "d":
      return [d.getDate(), 2];
    case "m":
      return [d.getMonth() + 1, 2];
    case "y":
      return [d.getFullYear() % 100, 2];
    case "H":
      return [d.getHours(), 2];
    case "I":
      return [d.getHours() % 12 || 12, 2];
    case "M":
      return [d.getMinutes(), 2];
    case "S":
      return [d.getSeconds(), 2];
    case "j":
      return [dayOfYear(d), 3];
    case "U":
      return [weekOfYear(d, 0), 2];
    case "W":
      return [weekOfYear(d, 1), 2];
    default:
      return null;
  }
}

/** `format` with each directive replaced for the local time of `date`. */
export function strftime(date: Date, format: string): string {
  return format.replace(/%(-?)(.)/gs, (whole, flag: string, c: string) => {
    const num = numeric(date, c);
    if (num) return flag ? String(num[0]) : pad(num[0], num[1]);
    if (flag) return whole; // the flag only means something on a number
    switch (c) {
      case "Y":
        return String(date.getFullYear());
      case "a":
        return DAYS[date.getDay()].slice(0, 3);
      case "A":
        return DAYS[date.getDay()];
      case "b":
      case "h":
        return MONTHS[date.getMonth()].slice(0, 3);
      case "B":
        return MONTHS[date.getMonth()];
      case "e":
        return pad(date.getDate(), 2, " ");
      case "f":
        return pad(date.getMilliseconds() * 1000, 6);
      case "p":
        return date.getHours() < 12 ? "AM" : "PM";
      case "w":
        return String(date.getDay());
      case "c":
        return strftime(date, "%a %b %e %H:%M:%S %Y");
      case "x":
        return strftime(date, "%m/%d/%y");
      case "X":
        return strftime(date, "%H:%M:%S");
      case "D":
        return strftime(date, "%m/%d/%y");
      case "F":
        return strftime(date, "%Y-%m-%d");
      case "T":
        return strftime(date, "%H:%M:%S");
      case "R":
        return strftime(date, "%H:%M");
      case "z":
      case "Z":
        return "";
      case "n":
        return "\n";
      case "t":
        return "\t";
      case "%":
        return "%";
      default:
        // glibc leaves a directive it does not know as written, and so does Python on Linux.
        return whole;
    }
  });
}
