# shellcheck shell=bash
# Shared by the set-up scripts (sourced, not run).

# ensure_apt_packages WHO PKG...: install the packages that are missing; none
# missing means no apt run at all, so a second set-up is fast.
ensure_apt_packages() {
	local who=$1 pkg
	shift
	local missing=()
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	echo "$who: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# make test runs some set-up steps side by side: wait for another's apt lock rather than fail.
	apt-get -o DPkg::Lock::Timeout=900 update -qq
	apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The Debian archive this machine's apt uses (a site's mirror or proxy), for debootstrap:
# the first `deb` source of /etc/apt/sources.list, sources.list.d/*.list (one-line form) or
# sources.list.d/*.sources (deb822) whose URI ends in /debian; else deb.debian.org.
# APT_ETC (default /etc/apt) is for tests.
debian_mirror() {
	local etc=${APT_ETC:-/etc/apt} file uri
	for file in "$etc/sources.list" "$etc"/sources.list.d/*.list; do
		[[ -r $file ]] || continue
		# deb [options] URI suite components
		uri=$(sed -nE 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+\/debian)\/?[[:space:]].*/\2/p' "$file" | head -1)
		[[ -n $uri ]] && { echo "$uri"; return; }
	done
	for file in "$etc"/sources.list.d/*.sources; do
		[[ -r $file ]] || continue
		# Stanzas are separated by blank lines; take URIs of a stanza whose Types has deb.
		uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
			{ types = ""; uris = ""
			  for (i = 1; i <= NF; i++) {
				if ($i ~ /^Types:/) types = $i
				if ($i ~ /^URIs:/) uris = $i
			  }
			  if (types ~ /[[:space:]]deb([[:space:]]|$)/) {
				n = split(uris, u, /[[:space:]]+/)
				for (j = 2; j <= n; j++) if (u[j] ~ /\/debian\/?$/) { sub(/\/$/, "", u[j]); print u[j]; exit }
			  } }' "$file")
		[[ -n $uri ]] && { echo "$uri"; return; }
	done
	echo http://deb.debian.org/debian
}
