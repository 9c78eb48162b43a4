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
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
