#!/bbin/busybox sh
# /init of the cgroup-v2 guest (scripts/cgv2-guest.sh): mounts the host's /usr,
# /etc and the source tree read-only over 9p and the test disk, sets the host up as a
# systemd cgroup v2 host would be (a unified hierarchy only, cpu/memory/pids/io
# enabled, the tests in a service's cgroup), runs /disk/run.sh and prints its
# exit status as "cgv2-result rc=N" before powering off.
/bbin/busybox --install -s /bbin
export PATH=/bbin
# The initramfs (rootfs) cannot be pivot_root'ed away from, as a sandbox's
# init does: move to a tmpfs root first, as a booted host has a real root.
if [ "${1:-}" != stage2 ]; then
	mkdir -p /newroot
	mount -t tmpfs -o mode=755 tmpfs /newroot
	cp -a /bbin /lib /init /newroot/
	exec switch_root /newroot /init stage2
fi
mkdir -p /proc /sys /dev /tmp /run /var /root /host /disk /usr /etc
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
for m in virtio_pci 9pnet_virtio 9p virtio_blk crc32c_generic ext4; do modprobe "$m" || echo "cgv2: modprobe $m failed"; done
# The disk may appear a moment after its driver loads.
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose host /host || echo "cgv2: 9p mount failed"
mount -t ext4 /dev/vda /disk || echo "cgv2: disk mount failed"
mkdir -p /out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out /out || echo "cgv2: out mount failed"
mount --bind /host/usr /usr
mount --bind /host/etc /etc
ln -s usr/bin /bin; ln -s usr/sbin /sbin; ln -s usr/lib64 /lib64
for e in /usr/lib/*; do [ -e "/lib/${e##*/}" ] || ln -s "$e" /lib/; done
kver=$(uname -r)
mount --bind "/disk/modules/$kver" "/lib/modules/$kver"
echo /bbin/modprobe >/proc/sys/kernel/modprobe
for m in veth bridge tun loop fuse overlay erofs nf_tables nft_ct nft_nat nft_masq nft_chain_nat \
	nft_reject_inet nft_fib_inet nft_limit nfnetlink nf_conntrack nf_nat br_netfilter; do
	modprobe "$m" 2>/dev/null || echo "cgv2: no module $m"
done
mount -t tmpfs -o mode=755 tmpfs /run
# /tmp and /var on the disk's ext4, as on a bookworm host's root file system
# (idmapped mounts of tmpfs need Linux 6.3; overlay lowers in /tmp are idmapped).
mkdir -p /disk/tmp /disk/var && chmod 1777 /disk/tmp && chmod 755 /disk/var
mount --bind /disk/tmp /tmp
mount --bind /disk/var /var
mount -t tmpfs -o mode=700 tmpfs /root
mkdir -p /var/lib/dsec/images /var/tmp /run/lock && chmod 1777 /var/tmp
mount --bind /disk/images /var/lib/dsec/images
# The source tree at its host path (the tests read their testdata from it).
src=$(sed -n 's/.*dsec\.root=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "$src"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 src "$src" || echo "cgv2: source mount failed"
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
ip link set lo up
hostname cgv2
# As systemd leaves a v2 host: controllers enabled at the root and in the
# slice, every process in a leaf.
echo "+cpu +io +memory +pids" >/sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/init.scope /sys/fs/cgroup/system.slice/dsec-tests.service
echo "+cpu +io +memory +pids" >/sys/fs/cgroup/system.slice/cgroup.subtree_control
echo $$ >/sys/fs/cgroup/init.scope/cgroup.procs
echo "cgv2: kernel $kver; /proc/filesystems cgroup lines:"; grep cgroup /proc/filesystems
echo "cgv2: mounts of type cgroup:"; grep -c ' cgroup ' /proc/mounts
echo "cgv2: root controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
t0=$(cut -d. -f1 /proc/uptime)
(
	echo 0 >/sys/fs/cgroup/system.slice/dsec-tests.service/cgroup.procs
	export HOME=/root TMPDIR=/tmp PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/bbin
	sh /disk/run.sh
) 2>&1
rc=$?
t1=$(cut -d. -f1 /proc/uptime)
echo "cgv2: tests took $((t1 - t0)) s (guest uptime $t1 s)"
echo "cgv2-result rc=$rc"
sync
umount /out /disk 2>/dev/null
poweroff -f
