# Sourced by the Java peers' run.sh (bench/kstreams, bench/flink, bench/nexmark): builds a Maven
# project once into $EDDY_CACHE/<name>/<hash of pom.xml and sources>/ and prints that folder.
#
#   maven_build NAME PROJECT_DIR JAR
#       NAME: the cache folder and the log prefix; the pom copies the dependencies into
#       -D<NAME>.lib.dir. JAR: the jar target/ holds after `mvn package`, copied beside lib/.
# Needs `repo` (the repository's root) set by the caller.

maven_build() {
    local name="$1" project="$2" jar="$3"
    local cache_root="${EDDY_CACHE:-$repo/.cache}/$name"
    local hash dir tmp
    # The hash covers everything that changes the jars, so an edit rebuilds and
    # an unchanged tree never calls Maven again.
    hash="$(cd "$project" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
    dir="$cache_root/$hash"
    if [[ -f "$dir/ok" ]]; then
        echo "$dir"
        return
    fi
    mkdir -p "$cache_root"
    exec 9>"$cache_root/.build.lock"
    flock 9
    if [[ ! -f "$dir/ok" ]]; then
        tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
        echo "$name: building $project into $dir" >&2
        local start=$SECONDS
        # mvn -q still prints colour codes: its output is shown only when it fails.
        if ! mvn -B -q -f "$project/pom.xml" package "-D$name.lib.dir=$tmp/lib" >"$tmp/build.log" 2>&1; then
            cat "$tmp/build.log" >&2
            echo "$name: build failed" >&2
            exit 1
        fi
        cp "$project/target/$jar" "$tmp/"
        touch "$tmp/ok"
        rm -rf "$dir"
        mv "$tmp" "$dir"
        # Builds of older sources: gone after a day (worktrees sharing a cache may still run theirs).
        find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/[0-9a-f]{16}' \
            ! -path "$dir" -mtime +1 -exec rm -rf {} +
        echo "$name: built in $((SECONDS - start)) s" >&2
    fi
    flock -u 9
    echo "$dir"
}
