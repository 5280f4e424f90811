log() { echo "[$(date +%T)] $*" >&2; }
retry() { for i in 1 2 3; do "$@" && return 0; sleep 1; done; return 1; }
log starting
retry curl -fsS https://pypi.org/ -o /dev/null
cat /etc/os-release | head -3
env | sort | grep -v SECRET
ps aux | grep python | awk '{print $2}'
