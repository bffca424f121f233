# Sourced by the suites' run.sh scripts.
#
# free_ports N prints the first of N consecutive loopback TCP ports that
# nothing listens on, below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range): a port in that range may be taken by any
# outgoing connection on the host between the pick and the bind, one below it
# only by another listener.
free_ports() {
  n=${1:-1}
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$lo" -gt $((10000 + 100 + n)) ] || lo=32768
  while :; do
    p=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % (lo - 10000 - n)))
    i=0
    while [ $i -lt "$n" ] && [ -z "$(ss -Htln "sport = :$((p + i))")" ]; do
      i=$((i + 1))
    done
    if [ $i -eq "$n" ]; then
      echo "$p"
      return
    fi
  done
}
