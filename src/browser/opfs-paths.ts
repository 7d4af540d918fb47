/**
 * Files of this origin's private file system appear to the engine as `/opfs/NAME` (one flat
 * folder, the OPFS root).
 */
export const OPFS_PREFIX = "/opfs/";

export function opfsPath(name: string): string {
  return OPFS_PREFIX + name;
}

/** NAME of /opfs/NAME (or of a bare NAME); an error for anything else. */
export function opfsName(path: string): string {
  const name = path.startsWith(OPFS_PREFIX) ? path.slice(OPFS_PREFIX.length) : path;
  if (name === "" || name.includes("/") || name === "." || name === "..")
    throw Object.assign(new Error(`ENOENT: ${path} is not a file of the browser's private file system (/opfs/NAME)`), {
      code: "ENOENT",
    });
  return name;
}
